// Every refusal of the OpenAI request reader: its status, the field it
// names (`param`) and its message; and what good requests become.
#include "runtime/server/openai_request.h"

#include <gtest/gtest.h>

namespace kiln::server {
namespace {

RequestContext context() {
  RequestContext c;
  c.model_id = "smollm2";
  c.context_length = 2048;
  c.max_messages = 4;
  return c;
}

ParsedRequest completion(std::string_view body) { return parseOpenAiRequest(Endpoint::kCompletions, body, context()); }
ParsedRequest chat(std::string_view body) { return parseOpenAiRequest(Endpoint::kChatCompletions, body, context()); }

// The error a body gets, as "STATUS param: message".
std::string refusal(const ParsedRequest& parsed) {
  if (!parsed.error) return "accepted";
  return std::to_string(parsed.error->status) + " " + parsed.error->param + ": " + parsed.error->message;
}

TEST(OpenAiRequestTest, CompletionDefaultsAreOpenAis) {
  ParsedRequest p = completion(R"({"model": "smollm2", "prompt": "Once upon"})");
  ASSERT_FALSE(p.error) << refusal(p);
  EXPECT_EQ(p.request.generation.prompt, "Once upon");
  EXPECT_FALSE(p.request.generation.chat);
  EXPECT_FALSE(p.request.stream);
  EXPECT_EQ(p.request.generation.sampling.max_tokens, 16);
  EXPECT_FLOAT_EQ(p.request.generation.sampling.temperature, 1.0f);
  EXPECT_EQ(p.request.generation.sampling.n, 1);
}

TEST(OpenAiRequestTest, EveryCompletionField) {
  ParsedRequest p = completion(R"({"model": "smollm2", "prompt": ["Hi"], "max_tokens": 12, "temperature": 0,
      "top_p": 0.9, "top_k": 40, "min_p": 0.05, "stop": ["\n", "END"], "seed": 7, "n": 2, "presence_penalty": 0.5,
      "frequency_penalty": -0.5, "repetition_penalty": 1.1, "ignore_eos": true, "stop_token_ids": [2],
      "user": "u1", "stream": true, "stream_options": {"include_usage": true}, "logprobs": null, "echo": false,
      "best_of": 2, "suffix": "", "logit_bias": {}})");
  ASSERT_FALSE(p.error) << refusal(p);
  const sampling::SamplingParams& s = p.request.generation.sampling;
  EXPECT_EQ(p.request.generation.prompt, "Hi");
  EXPECT_EQ(s.max_tokens, 12);
  EXPECT_EQ(s.temperature, 0.0f);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_FLOAT_EQ(s.min_p, 0.05f);
  EXPECT_EQ(s.stop_strings, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(s.seed, 7u);
  EXPECT_EQ(s.n, 2);
  EXPECT_FLOAT_EQ(s.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
  EXPECT_TRUE(s.ignore_eos);
  EXPECT_EQ(s.stop_token_ids, (std::vector<int32_t>{2}));
  EXPECT_TRUE(p.request.stream);
  EXPECT_TRUE(p.request.include_usage);
}

TEST(OpenAiRequestTest, TokenPromptsAndStopAsAString) {
  ParsedRequest p = completion(R"({"model": "smollm2", "prompt": [1, 2, 3], "stop": "\n"})");
  ASSERT_FALSE(p.error) << refusal(p);
  EXPECT_EQ(p.request.generation.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(p.request.generation.sampling.stop_strings, (std::vector<std::string>{"\n"}));
  p = completion(R"({"model": "smollm2", "prompt": [[4, 5]]})");
  ASSERT_FALSE(p.error) << refusal(p);
  EXPECT_EQ(p.request.generation.prompt_tokens, (std::vector<int32_t>{4, 5}));
}

TEST(OpenAiRequestTest, ChatMessagesWithTextParts) {
  ParsedRequest p = chat(R"({"model": "smollm2", "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "name": "ann", "content": [{"type": "text", "text": "Name "}, {"type": "text", "text": "colors"}]},
      {"role": "assistant", "content": "Red."}, {"role": "user", "content": "More?"}],
      "max_completion_tokens": 8, "logprobs": false})");
  ASSERT_FALSE(p.error) << refusal(p);
  const GenerationRequest& g = p.request.generation;
  EXPECT_TRUE(g.chat);
  ASSERT_EQ(g.messages.size(), 4u);
  EXPECT_EQ(g.messages[0].role, "system");
  EXPECT_EQ(g.messages[1].content, "Name colors");
  EXPECT_EQ(g.messages[3].content, "More?");
  EXPECT_EQ(g.sampling.max_tokens, 8);
}

TEST(OpenAiRequestTest, ChatMaxTokensDefaultsToTheContext) {
  ParsedRequest p = chat(R"({"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}]})");
  ASSERT_FALSE(p.error) << refusal(p);
  EXPECT_EQ(p.request.generation.sampling.max_tokens, 2048);
}

TEST(OpenAiRequestTest, NullIsLeftOut) {
  ParsedRequest p = completion(R"({"model": "smollm2", "prompt": "Hi", "max_tokens": null, "stop": null,
      "temperature": null, "stream": null, "seed": null, "user": null})");
  ASSERT_FALSE(p.error) << refusal(p);
  EXPECT_EQ(p.request.generation.sampling.max_tokens, 16);
}

TEST(OpenAiRequestTest, MalformedBodies) {
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": )")),
            "400 : the body is not valid JSON (at byte 32): syntax error while parsing value - unexpected end of "
            "input; expected '[', '{', or a literal");
  EXPECT_EQ(refusal(completion("")),
            "400 : the body is not valid JSON (at byte 1): syntax error while parsing value - unexpected end of input; "
            "expected '[', '{', or a literal");
  EXPECT_EQ(refusal(completion("[1]")), "400 : the body must be a JSON object, got a list");
  // Found by openai_request_fuzzer: the parser's number overflow escaped as an exception.
  for (auto parse : {completion, chat})
    EXPECT_EQ(refusal(parse(R"({"model": "smollm2", "max_tokens": 1e999})")),
              "400 : the body is not valid JSON: a number is too large for a 64-bit float");
  EXPECT_EQ(refusal(parseTokenizeRequest(R"({"prompt": 1e999})", context())),
            "400 : the body is not valid JSON: a number is too large for a 64-bit float");
  EXPECT_EQ(parseDetokenizeRequest(R"({"tokens": [1e999]})", context()).error.value().message,
            "the body is not valid JSON: a number is too large for a 64-bit float");
}

TEST(OpenAiRequestTest, UnknownFieldsAreNamed) {
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "promt": "x"})")),
            "400 promt: unknown field \"promt\" for /v1/completions");
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "messages": []})")),
            "400 messages: unknown field \"messages\" for /v1/completions");
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "tools": []})")),
            "400 tools: unknown field \"tools\" for /v1/completions");
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "max_completion_tokens": 3})")),
            "400 max_completion_tokens: unknown field \"max_completion_tokens\" for /v1/completions");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", "messages": [{"role": "user", "content": "Hi", "mood": 1}]})")),
            "400 messages[0].mood: messages[0]: unknown field \"mood\"; expected role, content, name, tool_calls, "
            "tool_call_id and reasoning_content");
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "stream": true,
                                  "stream_options": {"include_usage": true, "x": 1}})")),
            "400 stream_options.x: stream_options: unknown field \"x\"; expected include_usage");
}

TEST(OpenAiRequestTest, ModelMustBeTheServedOne) {
  EXPECT_EQ(refusal(completion(R"({"prompt": "Hi"})")), "400 model: model: missing; expected \"smollm2\"");
  EXPECT_EQ(refusal(completion(R"({"model": 3, "prompt": "Hi"})")), "400 model: model: expected a string, got 3");
  ParsedRequest p = completion(R"({"model": "gpt-4", "prompt": "Hi"})");
  EXPECT_EQ(refusal(p), "404 model: The model `gpt-4` does not exist; this server serves \"smollm2\"");
  EXPECT_EQ(p.error->code, "model_not_found");
}

TEST(OpenAiRequestTest, WrongTypes) {
  auto body = [](std::string_view field, std::string_view value) {
    return std::string(R"({"model": "smollm2", "prompt": "Hi", ")") + std::string(field) + "\": " + std::string(value) +
           "}";
  };
  EXPECT_EQ(refusal(completion(body("max_tokens", "\"ten\""))),
            "400 max_tokens: max_tokens: expected an integer in [1, 2147483647], got string \"ten\"");
  EXPECT_EQ(refusal(completion(body("max_tokens", "2.5"))), "400 max_tokens: max_tokens: expected an integer in [1, 2147483647], got 2.5");
  EXPECT_EQ(refusal(completion(body("max_tokens", "0"))), "400 max_tokens: max_tokens: expected an integer in [1, 2147483647], got 0");
  EXPECT_EQ(refusal(completion(body("temperature", "\"hot\""))),
            "400 temperature: temperature: expected a number, got string \"hot\"");
  EXPECT_EQ(refusal(completion(body("temperature", "1e300"))),
            "400 temperature: temperature: expected a finite number, got 1e+300");
  EXPECT_EQ(refusal(completion(body("stream", "1"))), "400 stream: stream: expected true or false, got 1");
  EXPECT_EQ(refusal(completion(body("stop", "[\"a\", 3]"))), "400 stop[1]: stop[1]: expected a non-empty string, got 3");
  EXPECT_EQ(refusal(completion(body("stop", "\"\""))), "400 stop: stop: expected a non-empty string, got string \"\"");
  EXPECT_EQ(refusal(completion(body("n", "0"))), "400 n: n: expected an integer in [1, 128], got 0");
  EXPECT_EQ(refusal(completion(body("seed", "\"s\""))),
            "400 seed: seed: expected an integer, got string \"s\"");
  EXPECT_EQ(refusal(completion(body("user", "5"))), "400 user: user: expected a string, got 5");
  EXPECT_EQ(refusal(completion(body("stream_options", "{\"include_usage\": true}"))),
            "400 stream_options: stream_options: only allowed with stream true");
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": ""})")),
            "400 prompt: prompt: expected a non-empty string, got string \"\"");
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": [1, -2]})")),
            "400 prompt[1]: prompt[1]: expected an integer in [0, 2147483647], got -2");
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2"})")),
            "400 prompt: prompt: missing; expected a string or a list of token ids");
}

TEST(OpenAiRequestTest, RangesFromSamplingParams) {
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "temperature": -1})")),
            "400 temperature: temperature -1 is invalid: expected >= 0");
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "top_p": 0})")),
            "400 top_p: top_p 0 is invalid: expected a value in (0, 1]");
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "presence_penalty": 3})")),
            "400 presence_penalty: presence_penalty 3 is invalid: expected a value in [-2, 2]");
}

TEST(OpenAiRequestTest, MaxTokensBeyondTheContext) {
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "max_tokens": 1000000000})")),
            "400 max_tokens: max_tokens: 1000000000 is more than the model's context length of 2048 tokens");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}],
                              "max_completion_tokens": 2049})")),
            "400 max_completion_tokens: max_completion_tokens: 2049 is more than the model's context length of "
            "2048 tokens");
}

TEST(OpenAiRequestTest, BadMessages) {
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2"})")),
            "400 messages: messages: missing; expected a list of {role, content}");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", "messages": []})")),
            "400 messages: messages: expected a non-empty list of {role, content}, got a list");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", "messages": [{"role": "user", "content": "a"},
      {"role": "user", "content": "b"}, {"role": "user", "content": "c"}, {"role": "user", "content": "d"},
      {"role": "user", "content": "e"}]})")),
            "400 messages: messages: 5 messages is more than this server's limit of 4");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", "messages": ["Hi"]})")),
            "400 messages[0]: messages[0]: expected an object {role, content}, got string \"Hi\"");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", "messages": [{"role": "robot", "content": "x"}]})")),
            "400 messages[0].role: messages[0].role: expected \"system\", \"developer\", \"user\", \"assistant\" or "
            "\"tool\", got string \"robot\"");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", "messages": [{"role": "user"}]})")),
            "400 messages[0].content: messages[0]: missing content");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", "messages": [{"content": "x"}]})")),
            "400 messages[0].role: messages[0]: missing role");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", "messages": [{"role": "user", "content": 5}]})")),
            "400 messages[0].content: messages[0].content: expected a string or a list of text parts, got 5");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", "messages": [{"role": "user", "content": [{"type": "image_url",
      "image_url": {"url": "x"}}]}]})")),
            "400 messages[0].content[0].type: messages[0].content[0].type: content of type string \"image_url\" is "
            "not supported by kiln yet");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", "messages": [{"role": "user", "content": [{"type": "text"}]}]})")),
            "400 messages[0].content[0].text: messages[0].content[0].text: expected a string, got null");
}

TEST(OpenAiRequestTest, Logprobs) {
  ParsedRequest p = completion(R"({"model": "smollm2", "prompt": "Hi", "logprobs": 2})");
  ASSERT_FALSE(p.error) << refusal(p);
  EXPECT_EQ(p.request.generation.sampling.logprobs, 2);
  p = completion(R"({"model": "smollm2", "prompt": "Hi"})");
  EXPECT_EQ(p.request.generation.sampling.logprobs, -1);
  const std::string messages = R"("messages": [{"role": "user", "content": "Hi"}])";
  p = chat(R"({"model": "smollm2", )" + messages + R"(, "logprobs": true})");
  ASSERT_FALSE(p.error) << refusal(p);
  EXPECT_EQ(p.request.generation.sampling.logprobs, 0);
  p = chat(R"({"model": "smollm2", )" + messages + R"(, "logprobs": true, "top_logprobs": 20})");
  EXPECT_EQ(p.request.generation.sampling.logprobs, 20);
  p = chat(R"({"model": "smollm2", )" + messages + R"(, "logprobs": false})");
  EXPECT_EQ(p.request.generation.sampling.logprobs, -1);
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "logprobs": 21})")),
            "400 logprobs: logprobs: expected an integer in [0, 20], got 21");
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "logprobs": true})")),
            "400 logprobs: logprobs: expected an integer in [0, 20], got true");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", )" + messages + R"(, "logprobs": 3})")),
            "400 logprobs: logprobs: expected true or false, got 3");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", )" + messages + R"(, "top_logprobs": 2})")),
            "400 top_logprobs: top_logprobs: only allowed with logprobs true");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", )" + messages + R"(, "logprobs": true, "top_logprobs": 21})")),
            "400 top_logprobs: top_logprobs: expected an integer in [0, 20], got 21");
}

TEST(OpenAiRequestTest, ToolsToolChoiceAndToolMessages) {
  ParsedRequest p = chat(R"({"model": "smollm2", "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "18 C"}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
      "tool_choice": "none", "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_FALSE(p.error) << refusal(p);
  const GenerationRequest& g = p.request.generation;
  ASSERT_EQ(g.messages.size(), 3u);
  ASSERT_EQ(g.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(g.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(g.messages[2].role, "tool");
  EXPECT_EQ(g.messages[2].tool_call_id, "c1");
  // As written: "type" before "function".
  EXPECT_EQ(g.tools,
            std::vector<std::string>{R"({"type":"function","function":{"name":"get_weather","parameters":{}}})"});
  EXPECT_EQ(p.request.tool_choice, ToolChoice::kNone);
  EXPECT_EQ(g.chat_template_kwargs, R"({"enable_thinking":false})");
  const std::string messages = R"("messages": [{"role": "user", "content": "Hi"}])";
  p = chat(R"({"model": "smollm2", )" + messages + R"(, "tool_choice": "auto"})");
  EXPECT_EQ(p.request.tool_choice, ToolChoice::kAuto);
  p = chat(R"({"model": "smollm2", )" + messages + R"(, "tool_choice": "required"})");
  EXPECT_EQ(refusal(p), "400 tool_choice: tool_choice: tool_choice \"required\" is not supported by kiln yet");
  EXPECT_EQ(p.error->code, "unsupported_field");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", )" + messages +
                         R"(, "tool_choice": {"type": "function", "function": {"name": "f"}}})")),
            "400 tool_choice: tool_choice: tool_choice naming a function "
            "({\"function\":{\"name\":\"f\"},\"type\":\"function\"}) is not supported by kiln yet");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", )" + messages + R"(, "tool_choice": "sometimes"})")),
            "400 tool_choice: tool_choice: expected \"none\" or \"auto\", got string \"sometimes\"");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", )" + messages + R"(, "tools": [3]})")),
            "400 tools[0]: tools[0]: expected an object, got 3");
  EXPECT_EQ(refusal(chat(R"({"model": "smollm2", "messages": [{"role": "assistant", "content": null,
      "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]}]})")),
            "400 messages[0].tool_calls[0].function.name: messages[0].tool_calls[0].function.name: expected a string, "
            "got null");
}

TEST(OpenAiRequestTest, SpeculationAndPriority) {
  ParsedRequest p = completion(R"({"model": "smollm2", "prompt": "Hi", "priority": 3,
                                   "speculation": {"method": "ngram", "k": 2}})");
  ASSERT_FALSE(p.error) << refusal(p);
  EXPECT_EQ(p.request.generation.priority, 3);
  EXPECT_EQ(p.request.generation.speculation.method, SpecMethod::kNgram);
  EXPECT_EQ(p.request.generation.speculation.tree.text(), "chain:2");
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "speculation": {"method": "ngram", "k": 0}})")),
            "400 speculation.k: speculation.k: expected an integer in [1, 1023], got 0");
  EXPECT_TRUE(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "speculation": {"method": "medusa"}})"))
                  .starts_with("400 speculation.method: speculation.method: expected \"ngram\""));
}

TEST(OpenAiRequestTest, FieldsNotSupportedYetAreRefusedNotFaked) {
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "echo": true})")),
            "400 echo: echo: echoing the prompt is not supported by kiln yet");
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "best_of": 3})")),
            "400 best_of: best_of: best_of other than n is not supported by kiln yet");
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "suffix": "end"})")),
            "400 suffix: suffix: a suffix is not supported by kiln yet");
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": "Hi", "logit_bias": {"5": 1}})")),
            "400 logit_bias: logit_bias: biasing logits is not supported by kiln yet");
  EXPECT_EQ(refusal(completion(R"({"model": "smollm2", "prompt": ["a", "b"]})")),
            "400 prompt: prompt: a list of several prompts in one request is not supported by kiln yet");
}

}  // namespace
}  // namespace kiln::server
