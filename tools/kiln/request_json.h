// One generation request as a JSON object: a line of `kiln generate`'s
// input, and the body an OpenAI-style server will take. Read in one place
// into a GenerationRequest; every error names the field and what was
// expected, and a field this reader does not know is an error naming it.
//
//   {"id": "q7", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32,
//    "temperature": 0.7, "stop": ["\n\n"], "n": 2}
//
// Fields (JSON names, the OpenAI / vLLM spellings):
//   id                  a string or an integer, echoed in the answer
//   prompt              a string (used as is, no template), or a list of token ids
//   messages            rendered with the model's chat template (roles, content
//                       parts, tool_calls, tool_call_id, name, reasoning_content:
//                       runtime/request/generation_fields.h);
//                       exactly one of prompt and messages is required
//   max_tokens ... speculation   the table of runtime/request/generation_fields.h
//                       (sampling, stop, n, priority, logprobs, speculation),
//                       the same as kiln serve's
//   tools               function schemas the chat template offers the model
//   chat_template_kwargs  more template variables, e.g. {"enable_thinking": false}
// Absent fields keep SamplingParams' defaults (greedy, 256 tokens, n 1) and
// priority 0; null is an error; ranges are SamplingParams::validate()'s.
#pragma once

#include <span>
#include <string_view>

#include <nlohmann/json.hpp>

#include "runtime/engine/engine.h"
#include "runtime/support/error.h"

namespace kiln {

struct JsonRequest {
  nlohmann::json id;  // the "id" as given (a string or an integer); null when absent
  GenerationRequest request;
};

// A parsed JSON object -> the request.
Result<JsonRequest> requestFromJson(const nlohmann::json& body);
// JSON text (one line of a JSONL file) -> the request; text that is not JSON
// is an error giving the column and what the parser expected there.
Result<JsonRequest> requestFromJsonText(std::string_view text);
// The field names the reader accepts, in the order errors list them.
std::span<const std::string_view> requestJsonFields();

}  // namespace kiln
