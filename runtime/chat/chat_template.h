// Chat templates: turns a conversation into the prompt text a model was
// trained on. Models ship their template as Jinja source (GGUF
// tokenizer.chat_template, HF tokenizer_config.json); kiln does not run
// Jinja but recognises the template's family from its source and renders
// that family natively. Each family's output is checked against Python
// jinja2 renders of the real templates (runtime/chat/testdata).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/support/error.h"

namespace kiln {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

enum class ChatTemplateFamily {
  // <|im_start|>role\ncontent<|im_end|>\n (SmolLM2, Qwen), optionally with a
  // default system prompt when the conversation has none.
  kChatML,
  // Llama-3: <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>,
  // content trimmed, BOS first.
  kLlama3,
  // Mistral-7B-Instruct: BOS [INST] user [/INST]assistant</s> ..., strictly
  // alternating user/assistant, no system role.
  kMistral,
};

std::string_view chatTemplateFamilyName(ChatTemplateFamily family);

class ChatTemplate {
 public:
  // Recognises the family of `jinja_source`. `bos_text` / `eos_text` are
  // the model's BOS and EOS token texts (used by Llama-3 and Mistral).
  // An unrecognised template is an error naming its first characters and
  // the supported families.
  static Result<ChatTemplate> fromTemplateString(const std::string& jinja_source,
                                                 const std::string& bos_text,
                                                 const std::string& eos_text);

  // The prompt text. `add_generation_prompt` appends the header that opens
  // the assistant's turn. Fails where the real template would raise (a
  // system message for Mistral, turns that do not alternate).
  Result<std::string> apply(const std::vector<ChatMessage>& messages,
                            bool add_generation_prompt) const;

  ChatTemplateFamily family() const { return family_; }
  // ChatML's built-in system prompt ("" when the template has none).
  const std::string& defaultSystemPrompt() const { return default_system_; }

 private:
  ChatTemplate() = default;
  ChatTemplateFamily family_ = ChatTemplateFamily::kChatML;
  std::string bos_;
  std::string eos_;
  std::string default_system_;
};

}  // namespace kiln
