// The JSON OpenAI clients expect back: a whole completion or chat
// completion, the server-sent-event chunks of a streamed one, and the usage.
//   completion:  {"id": "cmpl-..", "object": "text_completion", "choices": [{"index", "text", "logprobs",
//                 "finish_reason"}], "usage": {...}}
//   chat:        {"id": "chatcmpl-..", "object": "chat.completion", "choices": [{"index", "message":
//                 {"role": "assistant", "content"}, "logprobs", "finish_reason"}], "usage": {...}}
//   chat chunk:  {"object": "chat.completion.chunk", "choices": [{"index", "delta": {"content"}, ...}]}
// logprobs, when asked for: completions' legacy form {"tokens", "token_logprobs",
// "top_logprobs": [{token: logprob}], "text_offset"}; chat's {"content": [{"token",
// "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}. A
// logprob of -inf is written as -9999.0 (vLLM's), JSON having no infinity.
// Chat answers with tools offered (tool_choice auto) are read for tool calls
// in the template's format (runtime/chat/tool_calls.h): message {"content":
// the text before the calls or null, "tool_calls": [{"id", "type": "function",
// "function": {"name", "arguments"}}]}, finish_reason "tool_calls".
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/chat/tool_calls.h"
#include "runtime/engine/engine.h"
#include "runtime/server/openai_request.h"
#include "runtime/server/request_channel.h"

namespace kiln::server {

// What every object of one response shares.
struct ResponseHeader {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;       // "cmpl-<hex>" or "chatcmpl-<hex>"
  int64_t created = 0;  // Unix seconds
  std::string model;
  int logprobs = -1;  // alternatives per token; -1: no logprobs
  bool token_ids = false;  // choices and chunks list their token ids
  // Chat: the format tool calls are read in; kNone: the answer is text.
  ToolCallFormat tool_calls = ToolCallFormat::kNone;
};

// A fresh header: a random id with the endpoint's prefix, the time now.
ResponseHeader newResponseHeader(Endpoint endpoint, const std::string& model);

// "stop" for EOS and stop strings, "length" for max_tokens or the context;
// a cancelled or failed completion keeps kiln's name ("cancelled", "error").
std::string_view apiFinishReason(FinishReason reason);

struct CompletedChoice {
  std::string text;
  RequestStats stats;
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprob> logprobs;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose KV the prefix cache held (prompt_tokens_details)
};
// The prompt counted once (the completions share it), every completion's tokens.
Usage usageOf(const std::vector<CompletedChoice>& choices);

nlohmann::json completeResponse(const ResponseHeader& header, const std::vector<CompletedChoice>& choices);

// Streamed chunks.
nlohmann::json roleChunk(const ResponseHeader& header, int index);  // chat's first: {"role": "assistant"}
// `text_offset`: completions' characters before this text in its choice.
nlohmann::json textChunk(const ResponseHeader& header, int index, const ChannelUpdate::Text& text,
                         int64_t text_offset = 0);
// Chat with tool calls read: the whole answer at its end, as content or
// tool_calls; returns whether it held calls.
nlohmann::json answerChunk(const ResponseHeader& header, int index, const CompletedChoice& choice, bool& called);
nlohmann::json finishChunk(const ResponseHeader& header, int index, FinishReason reason, bool called_tools = false);
// Characters (code points) of UTF-8 text: OpenAI's text_offset unit.
int64_t textLength(std::string_view text);
nlohmann::json usageChunk(const ResponseHeader& header, const Usage& usage);

// One server-sent event: "data: <json>\n\n".
std::string serverSentEvent(const nlohmann::json& chunk);
inline constexpr std::string_view kStreamEnd = "data: [DONE]\n\n";

}  // namespace kiln::server
