// The body of POST /v1/completions and /v1/chat/completions, read in one
// place into a GenerationRequest. Every refusal is an ApiError naming the
// field (`param`) and what was expected; a field this reader does not know
// is refused by name rather than silently ignored.
//
// Both endpoints: model (required, the served id), stream, stream_options
// {include_usage}, user (ignored), logit_bias, return_token_ids (vLLM's:
// choices and chunks carry "token_ids"), and the shared table of
// runtime/request/generation_fields.h: max_tokens, temperature, top_p,
// top_k, min_p, stop, seed, n, presence_penalty, frequency_penalty,
// repetition_penalty, ignore_eos, stop_token_ids, priority, speculation.
// Completions: prompt (required: a string, a list of token ids, or a list
// holding one of those), logprobs (an integer: alternatives per token),
// echo, best_of, suffix.
// Chat: messages (required: roles system, developer, user, assistant, tool;
// content a string or a list of {"type": "text", "text": ...} parts;
// assistant tool_calls, tool_call_id, name), max_completion_tokens,
// logprobs (true or false) with top_logprobs, tools, tool_choice ("none" or
// "auto"), chat_template_kwargs.
// null is the same as leaving a field out. OpenAI's fields kiln cannot
// honour yet (echo, best_of != n, suffix, logit_bias, tool_choice
// "required" or naming a function) are refused when they ask for
// something, not faked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat/tool_calls.h"
#include "runtime/engine/engine.h"
#include "runtime/server/api_error.h"

namespace kiln::server {

enum class Endpoint { kCompletions, kChatCompletions };

// What a request is checked against: the served model and the server's limits.
struct RequestContext {
  std::string model_id;        // the only accepted `model`
  int64_t context_length = 0;  // tokens; max_tokens above it is refused
  int64_t max_messages = 1024; // chat messages a request may carry
  // How the served model's chat template writes tool calls: the format a
  // chat answer is read in when tools are offered.
  ToolCallFormat tool_call_format = ToolCallFormat::kNone;
};

// "auto": the model's answer is searched for tool calls (when tools are
// given); "none": the answer is text, though the template still shows the
// tools (vLLM's default).
enum class ToolChoice { kAuto, kNone };

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  ToolChoice tool_choice = ToolChoice::kAuto;
  GenerationRequest generation;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
  bool return_token_ids = false;  // vLLM's: each choice (and chunk) lists its generated token ids
};

struct ParsedRequest {
  OpenAiRequest request;
  std::optional<ApiError> error;  // set: answer this instead
};

// JSON text -> the request; text that is not a JSON object is a 400 giving
// the parser's position.
ParsedRequest parseOpenAiRequest(Endpoint endpoint, std::string_view body, const RequestContext& context);

// vLLM's POST /tokenize: {"model"?, "prompt": text or ids} or {"model"?,
// "messages", "tools"?, "chat_template_kwargs"?}: the prompt the engine
// would run (the chat template rendered with the generation prompt).
ParsedRequest parseTokenizeRequest(std::string_view body, const RequestContext& context);
// vLLM's POST /detokenize: {"model"?, "tokens": [ids]}.
struct DetokenizeRequest {
  std::vector<int32_t> tokens;
  std::optional<ApiError> error;
};
DetokenizeRequest parseDetokenizeRequest(std::string_view body, const RequestContext& context);

}  // namespace kiln::server
