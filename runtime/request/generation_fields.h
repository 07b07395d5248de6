// The fields of a generation request as JSON, in OpenAI's / vLLM's
// spelling: one table both request readers use, `kiln generate`'s JSONL
// lines (tools/kiln/request_json.h) and `kiln serve`'s bodies
// (runtime/server/openai_request.h). A reader decides which fields it
// takes, what null means and how a FieldError reaches its user (a
// line-numbered message; an OpenAI error with `param`); the table decides
// what each field's value may be and where it lands.
//
//   max_tokens, max_completion_tokens  integers >= 1
//   temperature, top_p, min_p, presence_penalty, frequency_penalty,
//   repetition_penalty                 numbers (ranges: SamplingParams::validate)
//   top_k                              an integer, -1 (vLLM's "off") or >= 0
//   seed                               an integer
//   n                                  an integer in [1, 128]
//   stop                               a string or a list of strings
//   stop_token_ids                     a list of token ids
//   ignore_eos                         true or false
//   priority                           an integer, higher first
//   logprobs                           an integer in [0, 20]: the token's log
//                                      probability and that many alternatives
//   speculation                        {"method": "ngram", "k": K} or
//                                      {"method": "ngram", "tree": [W1, W2, ...]}
// and the chat fields: messages, tools, chat_template_kwargs.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/engine/engine.h"

namespace kiln {

// A refused field: `param` is its path ("stop[1]", "messages[0].role"),
// `message` the whole sentence ("stop[1]: expected a non-empty string, got
// 3"). `unsupported`: a value kiln understands and does not implement
// (the server answers code unsupported_field).
struct FieldError {
  std::string param;
  std::string message;
  bool unsupported = false;
};
using FieldStatus = std::optional<FieldError>;

// "PARAM: expected WHAT, got <the value described>".
FieldError expectedValue(const std::string& param, std::string_view what, const nlohmann::json& got);
// "PARAM: WHAT is not supported by kiln yet".
FieldError notSupported(const std::string& param, std::string_view what);

// One field and how its (non-null) value lands in the request.
struct GenerationField {
  std::string_view name;
  FieldStatus (*read)(const nlohmann::json& value, GenerationRequest& out);
};

// The sampling, stopping, scheduling, log-probability and speculation fields
// above, in this order.
std::span<const GenerationField> generationFields();
const GenerationField* findGenerationField(std::string_view name);

// An integer in [lo, hi]; a number with no fraction (16.0) counts as one.
// The expectation reads "an integer", "an integer >= LO" or "an integer in
// [LO, HI]".
std::optional<int64_t> readInteger(const std::string& param, const nlohmann::json& v, int64_t lo, int64_t hi,
                                   FieldStatus& error);

// messages: [{role, content, name, tool_calls, tool_call_id,
// reasoning_content}]. role "system", "developer" (read as system), "user",
// "assistant" or "tool"; content a string, a list of {"type": "text",
// "text"} parts (joined), or null in an assistant turn with tool_calls;
// tool_calls [{id, type: "function", function: {name, arguments: a JSON
// string or an object}}].
FieldStatus readMessages(const nlohmann::json& v, std::vector<ChatMessage>& out);
// tools: a list of function schemas (objects), kept as JSON text.
FieldStatus readTools(const nlohmann::json& v, std::vector<std::string>& out);
// chat_template_kwargs: an object of more template variables.
FieldStatus readChatTemplateKwargs(const nlohmann::json& v, std::string& out);
// nlohmann::json sorts object keys; a tool schema goes to the template in
// the order it was written (the order the model saw in training): the
// request's `tools` again, from its text, with their keys in order.
std::vector<std::string> toolsInWrittenOrder(std::string_view body_text);

}  // namespace kiln
