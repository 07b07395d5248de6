#include "tools/kiln/request_json.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

std::string errorOf(std::string_view text) {
  auto parsed = requestFromJsonText(text);
  return parsed.ok() ? "ok" : parsed.error().message;
}

TEST(RequestJsonTest, PromptAloneKeepsTheDefaults) {
  auto r = requestFromJsonText(R"({"prompt": "Hello"})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->id.is_null());
  EXPECT_EQ(r->request.prompt, "Hello");
  EXPECT_FALSE(r->request.chat);
  EXPECT_TRUE(r->request.prompt_tokens.empty());
  EXPECT_EQ(r->request.priority, 0);
  const sampling::SamplingParams defaults;
  EXPECT_EQ(r->request.sampling.max_tokens, defaults.max_tokens);
  EXPECT_EQ(r->request.sampling.temperature, defaults.temperature);
  EXPECT_EQ(r->request.sampling.n, 1);
}

TEST(RequestJsonTest, EveryField) {
  auto r = requestFromJsonText(R"({
      "id": "q7", "prompt": "Once", "max_tokens": 12, "temperature": 0.7, "top_p": 0.9,
      "top_k": 40, "min_p": 0.05, "seed": 18446744073709551615, "stop": ["\n\n", "END"],
      "stop_token_ids": [2, 7], "n": 3, "priority": -2, "ignore_eos": true,
      "presence_penalty": 0.5, "frequency_penalty": -0.25, "repetition_penalty": 1.1})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->id, "q7");
  const GenerationRequest& q = r->request;
  EXPECT_EQ(q.prompt, "Once");
  EXPECT_EQ(q.priority, -2);
  const sampling::SamplingParams& s = q.sampling;
  EXPECT_EQ(s.max_tokens, 12);
  EXPECT_FLOAT_EQ(s.temperature, 0.7f);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_FLOAT_EQ(s.min_p, 0.05f);
  EXPECT_EQ(s.seed, 18446744073709551615ull);
  EXPECT_EQ(s.stop_strings, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(s.stop_token_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(s.n, 3);
  EXPECT_TRUE(s.ignore_eos);
  EXPECT_FLOAT_EQ(s.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -0.25f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
}

TEST(RequestJsonTest, MessagesUseTheChatTemplate) {
  auto r = requestFromJsonText(
      R"({"id": 42, "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Colors?"}]})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->id, 42);
  EXPECT_TRUE(r->request.chat);
  ASSERT_EQ(r->request.messages.size(), 4u);
  EXPECT_EQ(r->request.messages[0].role, "system");
  EXPECT_EQ(r->request.messages[0].content, "Be brief.");
  EXPECT_EQ(r->request.messages[3].role, "user");
  EXPECT_EQ(r->request.messages[3].content, "Colors?");
}

TEST(RequestJsonTest, ToolCallsToolResultsAndTools) {
  auto r = requestFromJsonText(R"({"messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "18 C"}],
    "tools": [{"type": "function", "function": {"name": "get_weather"}}],
    "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& m = r->request.messages;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1].content, "");
  ASSERT_EQ(m[1].tool_calls.size(), 1u);
  EXPECT_EQ(m[1].tool_calls[0].id, "c1");
  EXPECT_EQ(m[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(m[1].tool_calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(m[2].role, "tool");
  EXPECT_EQ(m[2].tool_call_id, "c1");
  EXPECT_EQ(m[2].name, "get_weather");
  // The schema keeps its key order ("type" before "function").
  EXPECT_EQ(r->request.tools, std::vector<std::string>{R"({"type":"function","function":{"name":"get_weather"}})"});
  EXPECT_EQ(r->request.chat_template_kwargs, R"({"enable_thinking":false})");
}

TEST(RequestJsonTest, VllmSpellingsLogprobsAndSpeculation) {
  auto r = requestFromJsonText(R"({"prompt": "Hi", "top_k": -1, "seed": -3, "logprobs": 5,
                                    "speculation": {"method": "ngram", "tree": [2, 1]}})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->request.sampling.top_k, 0);  // vLLM's -1: off
  EXPECT_EQ(r->request.sampling.seed, uint64_t(-3));
  EXPECT_EQ(r->request.sampling.logprobs, 5);
  EXPECT_EQ(r->request.speculation.method, SpecMethod::kNgram);
  EXPECT_EQ(r->request.speculation.tree.text(), "widths:2,1");
  r = requestFromJsonText(R"({"prompt": "Hi", "speculation": {"method": "ngram"}})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->request.speculation.tree.text(), "chain:4");  // --spec-k's default
  r = requestFromJsonText(R"({"prompt": "Hi", "speculation": {"method": "layerskip", "layers": 24, "k": 3}})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->request.speculation.method, SpecMethod::kLayerSkip);
  EXPECT_EQ(r->request.speculation.layerskip, 24);
  EXPECT_EQ(r->request.speculation.tree.text(), "chain:3");
  r = requestFromJsonText(R"({"prompt": "Hi", "speculation": {"method": "head"}})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->request.speculation.method, SpecMethod::kDraftHead);
  r = requestFromJsonText(R"({"messages": [{"role": "developer", "content": [{"type": "text", "text": "a"},
                              {"type": "text", "text": "b"}]}]})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->request.messages[0].role, "system");
  EXPECT_EQ(r->request.messages[0].content, "ab");
}

TEST(RequestJsonTest, PromptAsTokenIdsAndOneStopString) {
  auto r = requestFromJsonText(R"({"prompt": [1, 22, 333], "stop": "\n", "max_tokens": 4.0, "seed": 5})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->request.prompt.empty());
  EXPECT_EQ(r->request.prompt_tokens, (std::vector<int32_t>{1, 22, 333}));
  EXPECT_EQ(r->request.sampling.stop_strings, std::vector<std::string>{"\n"});
  EXPECT_EQ(r->request.sampling.max_tokens, 4);  // 4.0: a number with no fraction is an integer
  EXPECT_EQ(r->request.sampling.seed, 5u);
}

TEST(RequestJsonTest, FieldNamesInOrder) {
  std::vector<std::string_view> names(requestJsonFields().begin(), requestJsonFields().end());
  EXPECT_EQ(names, (std::vector<std::string_view>{
                       "id", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p",
                       "top_k", "min_p", "seed", "stop", "stop_token_ids", "n", "priority", "ignore_eos",
                       "presence_penalty", "frequency_penalty", "repetition_penalty", "logprobs", "speculation",
                       "tools", "chat_template_kwargs"}));
}

TEST(RequestJsonTest, ErrorsNameTheFieldAndWhatWasExpected) {
  const std::string fields =
      "expected id, prompt, messages, max_tokens, max_completion_tokens, temperature, top_p, top_k, min_p, seed, "
      "stop, stop_token_ids, n, priority, ignore_eos, presence_penalty, frequency_penalty, repetition_penalty, "
      "logprobs, speculation, tools, chat_template_kwargs";
  struct Case {
    const char* json;
    std::string message;
  };
  const Case cases[] = {
      // The object itself.
      {R"(["prompt"])", "expected a JSON object, got a list"},
      {R"("hello")", "expected a JSON object, got string \"hello\""},
      {R"({"promt": "Hi"})", "unknown field \"promt\"; " + fields},
      {R"({"prompt": "Hi", "beam_width": 4, "best_of": 2})", "unknown fields \"beam_width\", \"best_of\"; " + fields},
      {R"({})", "missing prompt or messages: expected one of them"},
      {R"({"max_tokens": 3})", "missing prompt or messages: expected one of them"},
      {R"({"prompt": "Hi", "messages": [{"role": "user", "content": "Hi"}]})",
       "prompt and messages: expected one of them, not both"},
      // id and prompt.
      {R"({"id": [1], "prompt": "Hi"})", "id: expected a string or an integer, got a list"},
      {R"({"id": 1.5, "prompt": "Hi"})", "id: expected a string or an integer, got 1.5"},
      {R"({"prompt": ""})", "prompt: expected a non-empty string or list of token ids, got string \"\""},
      {R"({"prompt": []})", "prompt: expected a non-empty string or list of token ids, got a list"},
      {R"({"prompt": 7})", "prompt: expected a non-empty string or list of token ids, got 7"},
      {R"({"prompt": null})", "prompt: expected a non-empty string or list of token ids, got null"},
      {R"({"prompt": [1, -2]})", "prompt[1]: expected an integer in [0, 2147483647], got -2"},
      {R"({"prompt": [1, "two"]})", "prompt[1]: expected an integer in [0, 2147483647], got string \"two\""},
      // messages.
      {R"({"messages": "Hi"})", "messages: expected a non-empty list of {role, content}, got string \"Hi\""},
      {R"({"messages": []})", "messages: expected a non-empty list of {role, content}, got a list"},
      {R"({"messages": ["Hi"]})", "messages[0]: expected an object {role, content}, got string \"Hi\""},
      {R"({"messages": [{"role": "user", "content": "Hi", "nick": "bob"}]})",
       "messages[0]: unknown field \"nick\"; expected role, content, name, tool_calls, tool_call_id and "
       "reasoning_content"},
      {R"({"messages": [{"content": "Hi"}]})", "messages[0]: missing role"},
      {R"({"messages": [{"role": "user"}]})", "messages[0]: missing content"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]})",
       "messages[1].role: expected \"system\", \"developer\", \"user\", \"assistant\" or \"tool\", got string "
       "\"robot\""},
      {R"({"messages": [{"role": 1, "content": "b"}]})",
       "messages[0].role: expected \"system\", \"developer\", \"user\", \"assistant\" or \"tool\", got 1"},
      {R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": 3}}]}]})",
       "messages[0].tool_calls[0].function.name: expected a string, got 3"},
      {R"({"messages": [{"role": "user", "content": "a"}], "tools": {"type": "function"}})",
       "tools: expected a list of function schemas, got an object"},
      {R"({"messages": [{"role": "user", "content": ["b"]}]})",
       "messages[0].content[0]: expected a content part {\"type\": \"text\", \"text\": ...}, got string \"b\""},
      {R"({"messages": [{"role": "user", "content": 5}]})",
       "messages[0].content: expected a string or a list of text parts, got 5"},
      {R"({"messages": [{"role": "user", "content": null, "tool_calls": []}]})",
       "messages[0]: tool_calls: only an assistant message calls tools"},
      // Integers.
      {R"({"prompt": "Hi", "max_tokens": "12"})",
       "max_tokens: expected an integer in [1, 2147483647], got string \"12\""},
      {R"({"prompt": "Hi", "max_tokens": 12.5})",
       "max_tokens: expected an integer in [1, 2147483647], got 12.5"},
      {R"({"prompt": "Hi", "max_tokens": 4294967296})",
       "max_tokens: expected an integer in [1, 2147483647], got 4294967296"},
      {R"({"prompt": "Hi", "max_tokens": 0})", "max_tokens: expected an integer in [1, 2147483647], got 0"},
      {R"({"prompt": "Hi", "top_k": true})", "top_k: expected an integer in [-1, 2147483647], got true"},
      {R"({"prompt": "Hi", "top_k": -2})", "top_k: expected an integer in [-1, 2147483647], got -2"},
      {R"({"prompt": "Hi", "seed": "7"})", "seed: expected an integer, got string \"7\""},
      {R"({"prompt": "Hi", "n": 0})", "n: expected an integer in [1, 128], got 0"},
      {R"({"prompt": "Hi", "n": 200})", "n: expected an integer in [1, 128], got 200"},
      {R"({"prompt": "Hi", "n": [2]})", "n: expected an integer in [1, 128], got a list"},
      {R"({"prompt": "Hi", "logprobs": 21})", "logprobs: expected an integer in [0, 20], got 21"},
      {R"({"prompt": "Hi", "logprobs": true})", "logprobs: expected an integer in [0, 20], got true"},
      // speculation.
      {R"({"prompt": "Hi", "speculation": "ngram"})",
       "speculation: expected an object {method, k} or {method, tree}, got string \"ngram\""},
      {R"({"prompt": "Hi", "speculation": {"k": 4}})",
       "speculation: missing method; expected \"ngram\", \"draft\", \"head\" or \"layerskip\""},
      {R"({"prompt": "Hi", "speculation": {"method": "eagle"}})",
       "speculation.method: expected \"ngram\", \"draft\", \"head\" or \"layerskip\", got string \"eagle\""},
      {R"({"prompt": "Hi", "speculation": {"method": "layerskip"}})",
       "speculation: layers (K) goes with method \"layerskip\", and only with it"},
      {R"({"prompt": "Hi", "speculation": {"method": "ngram", "layers": 4}})",
       "speculation: layers (K) goes with method \"layerskip\", and only with it"},
      {R"({"prompt": "Hi", "speculation": {"method": "layerskip", "layers": 0}})",
       "speculation.layers: expected an integer in [1, 4096], got 0"},
      {R"({"prompt": "Hi", "speculation": {"method": "ngram", "k": 0}})",
       "speculation.k: expected an integer in [1, 1023], got 0"},
      {R"({"prompt": "Hi", "speculation": {"method": "ngram", "k": 2, "tree": [2]}})",
       "speculation: k and tree both set: a chain of k tokens or a tree, not both"},
      {R"({"prompt": "Hi", "speculation": {"method": "ngram", "tree": [2, 0]}})",
       "speculation.tree[1]: expected an integer in [1, 1024], got 0"},
      {R"({"prompt": "Hi", "speculation": {"method": "ngram", "tree": [1024, 2]}})",
       "speculation.tree: expected a non-empty list of widths >= 1 (e.g. [2, 2, 1]) of at most 1024 nodes, got a "
       "list"},
      {R"({"prompt": "Hi", "speculation": {"method": "ngram", "depth": 2}})",
       "speculation: unknown field \"depth\"; expected method, k, tree and layers"},
      {R"({"prompt": "Hi", "priority": "high"})",
       "priority: expected an integer in [-2147483648, 2147483647], got string \"high\""},
      // Numbers.
      {R"({"prompt": "Hi", "temperature": "warm"})", "temperature: expected a number, got string \"warm\""},
      {R"({"prompt": "Hi", "temperature": -0.5})", "temperature -0.5 is invalid: expected >= 0"},
      {R"({"prompt": "Hi", "temperature": 1e300})", "temperature: expected a finite number, got 1e+300"},
      {R"({"prompt": "Hi", "top_p": 1.5})", "top_p 1.5 is invalid: expected a value in (0, 1]"},
      {R"({"prompt": "Hi", "top_p": null})", "top_p: expected a number, got null"},
      {R"({"prompt": "Hi", "min_p": 2})", "min_p 2 is invalid: expected a value in [0, 1]"},
      {R"({"prompt": "Hi", "min_p": {}})", "min_p: expected a number, got an object"},
      {R"({"prompt": "Hi", "presence_penalty": 3})", "presence_penalty 3 is invalid: expected a value in [-2, 2]"},
      {R"({"prompt": "Hi", "presence_penalty": false})", "presence_penalty: expected a number, got false"},
      {R"({"prompt": "Hi", "frequency_penalty": -2.5})",
       "frequency_penalty -2.5 is invalid: expected a value in [-2, 2]"},
      {R"({"prompt": "Hi", "frequency_penalty": "0"})", "frequency_penalty: expected a number, got string \"0\""},
      {R"({"prompt": "Hi", "repetition_penalty": 0})", "repetition_penalty 0 is invalid: expected > 0"},
      {R"({"prompt": "Hi", "repetition_penalty": [1]})", "repetition_penalty: expected a number, got a list"},
      // stop, stop_token_ids, ignore_eos.
      {R"({"prompt": "Hi", "stop": ""})", "stop: expected a non-empty string, got string \"\""},
      {R"({"prompt": "Hi", "stop": 3})", "stop: expected a string or a list of strings, got 3"},
      {R"({"prompt": "Hi", "stop": ["a", ""]})", "stop[1]: expected a non-empty string, got string \"\""},
      {R"({"prompt": "Hi", "stop": ["a", 2]})", "stop[1]: expected a non-empty string, got 2"},
      {R"({"prompt": "Hi", "stop_token_ids": 2})", "stop_token_ids: expected a list of token ids, got 2"},
      {R"({"prompt": "Hi", "stop_token_ids": [2, -4]})",
       "stop_token_ids[1]: expected an integer in [0, 2147483647], got -4"},
      {R"({"prompt": "Hi", "ignore_eos": 1})", "ignore_eos: expected true or false, got 1"},
      {R"({"prompt": "Hi", "ignore_eos": "yes"})", "ignore_eos: expected true or false, got string \"yes\""},
      // A long string value is cut in the message.
      {R"({"prompt": "Hi", "temperature": "a very long value that goes on and on and on and on"})",
       "temperature: expected a number, got string \"a very long value that goes on and on...\""},
      // Text that is not JSON.
      {R"({"prompt": "Hi", )",
       "invalid JSON at column 18: syntax error while parsing object key - unexpected end of input; expected "
       "string literal"},
      {R"({"prompt": no})",
       "invalid JSON at column 13: syntax error while parsing value - invalid literal; last read: '\"prompt\": no'"},
      {"", "invalid JSON at column 1: syntax error while parsing value - unexpected end of input; expected '[', '{', "
           "or a literal"},
  };
  for (const Case& c : cases) EXPECT_EQ(errorOf(c.json), c.message) << c.json;
}

TEST(RequestJsonTest, ErrorsLeaveNothingHalfRead) {
  // The first field in table order that fails is the one reported.
  EXPECT_EQ(errorOf(R"({"prompt": 1, "max_tokens": "x"})"),
            "prompt: expected a non-empty string or list of token ids, got 1");
  // Range checks run after every field is read, in SamplingParams' order.
  EXPECT_EQ(errorOf(R"({"prompt": "Hi", "top_p": 0, "temperature": -1})"),
            "temperature -1 is invalid: expected >= 0");
}

}  // namespace
}  // namespace kiln
