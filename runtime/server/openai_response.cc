#include "runtime/server/openai_response.h"

#include <chrono>
#include <cmath>
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
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

double finiteLogprob(float logprob) { return std::isfinite(logprob) ? double(logprob) : -9999.0; }

json byteList(const std::string& bytes) {
  json list = json::array();
  for (unsigned char b : bytes) list.push_back(int(b));
  return list;
}

// `text_offset`: characters before the first of these tokens in the choice's text.
json logprobsJson(const ResponseHeader& header, std::span<const TokenLogprob> logprobs, int64_t text_offset) {
  if (header.logprobs < 0) return nullptr;
  if (isChat(header)) {
    json content = json::array();
    for (const TokenLogprob& t : logprobs) {
      json top = json::array();
      for (const auto& [bytes, logprob] : t.top)
        top.push_back({{"token", bytes}, {"logprob", finiteLogprob(logprob)}, {"bytes", byteList(bytes)}});
      content.push_back({{"token", t.bytes},
                         {"logprob", finiteLogprob(t.logprob)},
                         {"bytes", byteList(t.bytes)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), offsets = json::array();
  for (const TokenLogprob& t : logprobs) {
    tokens.push_back(t.bytes);
    token_logprobs.push_back(finiteLogprob(t.logprob));
    // The chosen token is in its position's map too (vLLM's legacy form).
    json top = json::object();
    for (const auto& [bytes, logprob] : t.top) top[bytes] = finiteLogprob(logprob);
    top[t.bytes] = finiteLogprob(t.logprob);
    top_logprobs.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += textLength(t.bytes);
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(offsets)}};
}

std::string newToolCallId() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  return fmt::format("call_{:016x}{:08x}", random(), uint32_t(random()));
}

// The assistant's message or delta: content, or the tool calls read from it.
json answerMessage(const ResponseHeader& header, const std::string& text, bool delta, bool& called) {
  called = false;
  ParsedAnswer parsed = parseToolCalls(text, header.tool_calls);
  if (parsed.calls.empty()) return {{"content", text}};
  called = true;
  json calls = json::array();
  for (size_t i = 0; i < parsed.calls.size(); ++i) {
    const ChatToolCall& c = parsed.calls[i];
    json call = {{"id", c.id.empty() ? newToolCallId() : c.id},
                 {"type", "function"},
                 {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
    if (delta) call["index"] = int(i);
    calls.push_back(std::move(call));
  }
  json message = {{"content", parsed.content.empty() ? json(nullptr) : json(parsed.content)}};
  message["tool_calls"] = std::move(calls);
  return message;
}

json choiceChunk(const ResponseHeader& header, int index, json content, json finish_reason, json logprobs = nullptr,
                 const std::vector<int32_t>* token_ids = nullptr) {
  json choice = {{"index", index}, {"logprobs", std::move(logprobs)}, {"finish_reason", std::move(finish_reason)}};
  if (header.token_ids && token_ids) choice["token_ids"] = *token_ids;
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
    usage.cached_tokens = std::max(usage.cached_tokens, c.stats.cached_prompt_tokens);
    usage.completion_tokens += c.stats.generated_tokens;
  }
  return usage;
}

json completeResponse(const ResponseHeader& header, const std::vector<CompletedChoice>& choices) {
  json out = objectOf(header, /*chunk=*/false);
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    json choice = {{"index", int(i)},
                   {"logprobs", logprobsJson(header, choices[i].logprobs, 0)},
                   {"finish_reason", apiFinishReason(choices[i].stats.finish)}};
    if (isChat(header)) {
      bool called = false;
      json message = answerMessage(header, choices[i].text, /*delta=*/false, called);
      message["role"] = "assistant";
      choice["message"] = std::move(message);
      if (called) choice["finish_reason"] = "tool_calls";
    } else {
      choice["text"] = choices[i].text;
    }
    if (header.token_ids) choice["token_ids"] = choices[i].token_ids;
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  out["usage"] = usageJson(usageOf(choices));
  return out;
}

json roleChunk(const ResponseHeader& header, int index) {
  return choiceChunk(header, index, {{"role", "assistant"}, {"content", ""}}, nullptr);
}

json textChunk(const ResponseHeader& header, int index, const ChannelUpdate::Text& text, int64_t text_offset) {
  return choiceChunk(header, index, {{"content", text.text}}, nullptr, logprobsJson(header, text.logprobs, text_offset),
                     &text.token_ids);
}

json answerChunk(const ResponseHeader& header, int index, const CompletedChoice& choice, bool& called) {
  return choiceChunk(header, index, answerMessage(header, choice.text, /*delta=*/true, called), nullptr,
                     logprobsJson(header, choice.logprobs, 0), &choice.token_ids);
}

json finishChunk(const ResponseHeader& header, int index, FinishReason reason, bool called_tools) {
  return choiceChunk(header, index, json::object(), called_tools ? "tool_calls" : apiFinishReason(reason));
}

int64_t textLength(std::string_view text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
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
