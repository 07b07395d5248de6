// Tool calls in a model's answer: the formats the chat templates teach
// (runtime/chat/testdata/templates), read back into OpenAI's tool_calls.
//
//   hermes       Qwen2.5, Qwen3, Hermes-3: one or more
//                  <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//                the content is the text before the first <tool_call>.
//   llama3_json  Llama-3.1/3.2/3.3: the whole answer is
//                  {"name": "f", "parameters": {...}}
//                (or "arguments"), optionally after <|python_tag|>, several
//                separated by ";".
//   mistral      Mistral v0.3, Nemo:
//                  [TOOL_CALLS] [{"name": "f", "arguments": {...}, "id": "..."}]
//                the content is the text before [TOOL_CALLS].
// An answer that does not hold a well-formed call in its model's format is
// content, returned as it is.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat/chat_template.h"

namespace kiln {

enum class ToolCallFormat { kNone, kHermes, kLlama3Json, kMistral };

std::string_view toolCallFormatName(ToolCallFormat format);

// The format a chat template teaches, from what it writes: <tool_call>
// (hermes), [TOOL_CALLS] (mistral), "parameters" with an ipython role
// (llama3_json); kNone for a template that shows no tool calls.
ToolCallFormat toolCallFormatOf(std::string_view template_source);

struct ParsedAnswer {
  std::string content;                // the answer less its calls
  std::vector<ChatToolCall> calls;    // ids as the model wrote them (mistral) or empty;
                                      // arguments as compact JSON text
};

ParsedAnswer parseToolCalls(std::string_view answer, ToolCallFormat format);

}  // namespace kiln
