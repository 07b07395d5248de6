// The JSON OpenAI clients expect back: a whole completion or chat
// completion, the server-sent-event chunks of a streamed one, and the usage.
//   completion:  {"id": "cmpl-..", "object": "text_completion", "choices": [{"index", "text", "logprobs",
//                 "finish_reason"}], "usage": {...}}
//   chat:        {"id": "chatcmpl-..", "object": "chat.completion", "choices": [{"index", "message":
//                 {"role": "assistant", "content"}, "logprobs", "finish_reason"}], "usage": {...}}
//   chat chunk:  {"object": "chat.completion.chunk", "choices": [{"index", "delta": {"content"}, ...}]}
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/engine/engine.h"
#include "runtime/server/openai_request.h"

namespace kiln::server {

// What every object of one response shares.
struct ResponseHeader {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;       // "cmpl-<hex>" or "chatcmpl-<hex>"
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// A fresh header: a random id with the endpoint's prefix, the time now.
ResponseHeader newResponseHeader(Endpoint endpoint, const std::string& model);

// "stop" for EOS and stop strings, "length" for max_tokens or the context;
// a cancelled or failed completion keeps kiln's name ("cancelled", "error").
std::string_view apiFinishReason(FinishReason reason);

struct CompletedChoice {
  std::string text;
  RequestStats stats;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};
// The prompt counted once (the completions share it), every completion's tokens.
Usage usageOf(const std::vector<CompletedChoice>& choices);

nlohmann::json completeResponse(const ResponseHeader& header, const std::vector<CompletedChoice>& choices);

// Streamed chunks.
nlohmann::json roleChunk(const ResponseHeader& header, int index);  // chat's first: {"role": "assistant"}
nlohmann::json textChunk(const ResponseHeader& header, int index, std::string_view text);
nlohmann::json finishChunk(const ResponseHeader& header, int index, FinishReason reason);
nlohmann::json usageChunk(const ResponseHeader& header, const Usage& usage);

// One server-sent event: "data: <json>\n\n".
std::string serverSentEvent(const nlohmann::json& chunk);
inline constexpr std::string_view kStreamEnd = "data: [DONE]\n\n";

}  // namespace kiln::server
