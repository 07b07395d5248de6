// The answers' JSON: logprobs in the completions (legacy) and chat forms,
// tool calls read from a canned answer in a template's format, token ids,
// and the usage's cached prompt tokens.
#include "runtime/server/openai_response.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace kiln::server {
namespace {

using nlohmann::json;

ResponseHeader header(Endpoint endpoint) {
  ResponseHeader h = newResponseHeader(endpoint, "smollm2");
  h.logprobs = 2;
  return h;
}

// Two tokens, " Paris" and an incomplete UTF-8 byte, the second with an
// impossible alternative.
std::vector<TokenLogprob> twoTokens() {
  const float inf = std::numeric_limits<float>::infinity();
  return {{" Paris", -0.25f, {{" Paris", -0.25f}, {" the", -2.5f}}}, {"\xc3", -1.0f, {{",", -0.5f}, {"x", -inf}}}};
}

CompletedChoice choice(std::string text, std::vector<TokenLogprob> logprobs = {}) {
  CompletedChoice c;
  c.text = std::move(text);
  c.stats.finish = FinishReason::kEos;
  c.stats.prompt_tokens = 7;
  c.stats.cached_prompt_tokens = 4;
  c.stats.generated_tokens = 2;
  c.token_ids = {504, 31};
  c.logprobs = std::move(logprobs);
  return c;
}

TEST(OpenAiResponseTest, CompletionLogprobsLegacyForm) {
  ResponseHeader h = header(Endpoint::kCompletions);
  h.token_ids = true;
  const json out = completeResponse(h, {choice(" Paris\xc3", twoTokens())});
  const json& lp = out["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json({" Paris", "\xc3"}));
  EXPECT_EQ(lp["token_logprobs"], json({-0.25, -1.0}));
  // Each map: the alternatives and the chosen token; -inf is -9999.0.
  EXPECT_EQ(lp["top_logprobs"][0], json({{" Paris", -0.25}, {" the", -2.5}}));
  EXPECT_EQ(lp["top_logprobs"][1], json({{",", -0.5}, {"x", -9999.0}, {"\xc3", -1.0}}));
  EXPECT_EQ(lp["text_offset"], json({0, 6}));
  EXPECT_EQ(out["choices"][0]["token_ids"], json({504, 31}));
  EXPECT_EQ(out["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  // Streamed: offsets continue from what was sent.
  ChannelUpdate::Text text{0, "\xc3", {31}, {twoTokens()[1]}};
  const json chunk = textChunk(h, 0, text, 6);
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["text_offset"], json({6}));
  EXPECT_EQ(chunk["choices"][0]["token_ids"], json({31}));
  // Not asked for: null, and no token ids.
  h.logprobs = -1;
  h.token_ids = false;
  const json plain = completeResponse(h, {choice(" Paris")});
  EXPECT_TRUE(plain["choices"][0]["logprobs"].is_null());
  EXPECT_FALSE(plain["choices"][0].contains("token_ids"));
}

TEST(OpenAiResponseTest, ChatLogprobsContent) {
  const json out = completeResponse(header(Endpoint::kChatCompletions), {choice(" Paris\xc3", twoTokens())});
  const json& content = out["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0], json({{"token", " Paris"},
                              {"logprob", -0.25},
                              {"bytes", {32, 80, 97, 114, 105, 115}},
                              {"top_logprobs",
                               {{{"token", " Paris"}, {"logprob", -0.25}, {"bytes", {32, 80, 97, 114, 105, 115}}},
                                {{"token", " the"}, {"logprob", -2.5}, {"bytes", {32, 116, 104, 101}}}}}}));
  EXPECT_EQ(content[1]["bytes"], json({0xc3}));
  EXPECT_EQ(content[1]["top_logprobs"][1]["logprob"], -9999.0);
}

TEST(OpenAiResponseTest, ToolCallsFromTheAnswer) {
  ResponseHeader h = newResponseHeader(Endpoint::kChatCompletions, "qwen");
  h.tool_calls = ToolCallFormat::kHermes;
  const std::string answer =
      "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const json out = completeResponse(h, {choice(answer)});
  const json& c = out["choices"][0];
  EXPECT_EQ(c["finish_reason"], "tool_calls");
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["content"], "Checking.");
  ASSERT_EQ(c["message"]["tool_calls"].size(), 1u);
  const json& call = c["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_TRUE(call["id"].get<std::string>().starts_with("call_"));
  EXPECT_EQ(call["function"], json({{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}));
  // Streamed: one delta with the calls (indexed), then the finish.
  bool called = false;
  const json delta = answerChunk(h, 0, choice(answer), called);
  EXPECT_TRUE(called);
  EXPECT_EQ(delta["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
  EXPECT_EQ(finishChunk(h, 0, FinishReason::kEos, called)["choices"][0]["finish_reason"], "tool_calls");
  // No call in it, or a format that writes none: content and "stop".
  const json text = completeResponse(h, {choice("It is sunny.")});
  EXPECT_EQ(text["choices"][0]["message"]["content"], "It is sunny.");
  EXPECT_FALSE(text["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(text["choices"][0]["finish_reason"], "stop");
  h.tool_calls = ToolCallFormat::kNone;
  EXPECT_EQ(completeResponse(h, {choice(answer)})["choices"][0]["message"]["content"], answer);
}

}  // namespace
}  // namespace kiln::server
