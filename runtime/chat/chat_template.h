// Chat templates: turns a conversation into the prompt text a model was
// trained on. Models ship their template as Jinja source (GGUF
// tokenizer.chat_template, HF tokenizer_config.json); kiln runs it with
// its own Jinja interpreter (runtime/chat/jinja), with the variables and
// globals transformers' apply_chat_template passes. The renders of the
// real templates of SmolLM2, Llama-3/3.1/3.2/3.3, Qwen2.5, Qwen3,
// Mistral v0.1/v0.3/Nemo, Gemma-2/3, Hermes-3, Phi-3.5 and Granite-3.3 are
// checked byte for byte against jinja2's (runtime/chat/testdata,
// test/reference/make_chat_fixtures.py; docs/design/chat-templates.md).
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/support/error.h"

namespace kiln {

namespace jinja {
class Template;
}

// One call of a tool by the assistant, OpenAI-style.
struct ChatToolCall {
  std::string id;
  std::string name;
  // The arguments as JSON text; templates see an object as a mapping
  // (what transformers expects) and anything else as the string.
  std::string arguments = "{}";
};

struct ChatMessage {
  ChatMessage() = default;
  // {role, content}, as callers without tools write a message.
  ChatMessage(std::string role_, std::string content_) : role(std::move(role_)), content(std::move(content_)) {}

  std::string role;  // "system", "user", "assistant", "tool"
  std::string content;
  std::vector<ChatToolCall> tool_calls;  // assistant turns that call tools
  std::string tool_call_id;              // tool results: the call answered
  std::string name;                      // tool results: the tool's name
  std::string reasoning_content;         // assistant turns: the thinking (Qwen3)
};

struct ChatOptions {
  // Appends the header that opens the assistant's turn.
  bool add_generation_prompt = true;
  // Function schemas as JSON objects ({"type": "function", "function":
  // {...}}); none: the template sees tools=None.
  std::vector<std::string> tools;
  // More template variables as a JSON object, e.g. {"enable_thinking": false}.
  std::string extra_variables_json;
  // strftime_now's clock; unset: now, in local time.
  std::optional<std::time_t> now;
};

class ChatTemplate {
 public:
  // Parses `jinja_source`; `bos_text` / `eos_text` are the model's BOS and
  // EOS token texts (the bos_token / eos_token variables). Syntax errors
  // and constructs outside kiln's Jinja subset fail here, naming the line
  // and column.
  static Result<ChatTemplate> fromTemplateString(const std::string& jinja_source,
                                                 const std::string& bos_text,
                                                 const std::string& eos_text);

  // The prompt text. Fails where the template raises (its message is
  // carried: a system message Gemma-2 does not take, turns that do not
  // alternate) and on runtime errors, with line and column.
  Result<std::string> apply(const std::vector<ChatMessage>& messages, const ChatOptions& options) const;
  Result<std::string> apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;

  // The BOS text the template was given; a render that starts with it
  // already holds the BOS token (the tokenizer must not add a second).
  const std::string& bosText() const { return bos_; }
  // The Jinja source (tool_calls.h reads the format of tool calls from it).
  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;
  std::shared_ptr<const jinja::Template> template_;
  std::string bos_;
  std::string eos_;
  std::string source_;
};

}  // namespace kiln
