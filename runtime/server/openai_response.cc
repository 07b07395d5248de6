#include "runtime/server/openai_response.h"

#include <chrono>
#include <random>

#include <fmt/format.h>

namespace kiln::server {
namespace {

using nlohmann::json;

bool isChat(const ResponseHeader& header) { return header.endpoint == Endpoint::kChatCompletions; }

json objectOf(const ResponseHeader& header, bool chunk) {
  const char* object = isChat(header) ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", header.id}, {"object", object}, {"created", header.created}, {"model", header.model}};
}

json usageJson(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

json choiceChunk(const ResponseHeader& header, int index, json content, json finish_reason) {
  json choice = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", std::move(finish_reason)}};
  if (isChat(header))
    choice["delta"] = std::move(content);
  else
    choice["text"] = content.value("content", "");
  json chunk = objectOf(header, /*chunk=*/true);
  chunk["choices"] = json::array({std::move(choice)});
  return chunk;
}

}  // namespace

ResponseHeader newResponseHeader(Endpoint endpoint, const std::string& model) {
  thread_local std::mt19937_64 random{std::random_device{}()};
  ResponseHeader header;
  header.endpoint = endpoint;
  header.id = fmt::format("{}-{:016x}{:08x}", endpoint == Endpoint::kChatCompletions ? "chatcmpl" : "cmpl", random(),
                          uint32_t(random()));
  header.created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  header.model = model;
  return header;
}

std::string_view apiFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    default: return finishReasonName(reason);
  }
}

Usage usageOf(const std::vector<CompletedChoice>& choices) {
  Usage usage;
  for (const CompletedChoice& c : choices) {
    usage.prompt_tokens = std::max(usage.prompt_tokens, c.stats.prompt_tokens);
    usage.completion_tokens += c.stats.generated_tokens;
  }
  return usage;
}

json completeResponse(const ResponseHeader& header, const std::vector<CompletedChoice>& choices) {
  json out = objectOf(header, /*chunk=*/false);
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    json choice = {{"index", int(i)},
                   {"logprobs", nullptr},
                   {"finish_reason", apiFinishReason(choices[i].stats.finish)}};
    if (isChat(header))
      choice["message"] = {{"role", "assistant"}, {"content", choices[i].text}};
    else
      choice["text"] = choices[i].text;
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  out["usage"] = usageJson(usageOf(choices));
  return out;
}

json roleChunk(const ResponseHeader& header, int index) {
  return choiceChunk(header, index, {{"role", "assistant"}, {"content", ""}}, nullptr);
}

json textChunk(const ResponseHeader& header, int index, std::string_view text) {
  return choiceChunk(header, index, {{"content", text}}, nullptr);
}

json finishChunk(const ResponseHeader& header, int index, FinishReason reason) {
  return choiceChunk(header, index, json::object(), apiFinishReason(reason));
}

json usageChunk(const ResponseHeader& header, const Usage& usage) {
  json chunk = objectOf(header, /*chunk=*/true);
  chunk["choices"] = json::array();
  chunk["usage"] = usageJson(usage);
  return chunk;
}

std::string serverSentEvent(const json& chunk) {
  // Invalid UTF-8 (a model can emit a lone byte) is replaced, not thrown on.
  return "data: " + chunk.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace kiln::server
