// The tool-call parser reads back what each real template teaches: an
// assistant turn with a call, rendered by the template, parses into that
// call; and canned answers of each format (several calls, text before the
// calls, malformed JSON left as content).
#include "runtime/chat/tool_calls.h"
#include "test/source_root.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace kiln {
namespace {

std::string readTemplate(const std::string& file) {
  std::ifstream in(checkoutPath("runtime/chat/testdata/templates/" + file), std::ios::binary);
  EXPECT_TRUE(in) << "missing template " << file;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string json(std::string_view text) { return nlohmann::json::parse(text).dump(); }

TEST(ToolCallsTest, FormatFromTheTemplate) {
  const std::pair<const char*, ToolCallFormat> cases[] = {
      {"qwen2.5.jinja", ToolCallFormat::kHermes},          {"qwen3.jinja", ToolCallFormat::kHermes},
      {"hermes-3-tool-use.jinja", ToolCallFormat::kHermes}, {"llama-3.3.jinja", ToolCallFormat::kLlama3Json},
      {"llama-3.2.jinja", ToolCallFormat::kLlama3Json},    {"mistral-v0.3.jinja", ToolCallFormat::kMistral},
      {"mistral-nemo.jinja", ToolCallFormat::kMistral},    {"smollm2.jinja", ToolCallFormat::kNone},
      {"gemma-3.jinja", ToolCallFormat::kNone},            {"llama-3.jinja", ToolCallFormat::kNone},
  };
  for (auto [file, format] : cases)
    EXPECT_EQ(toolCallFormatName(toolCallFormatOf(readTemplate(file))), toolCallFormatName(format)) << file;
}

// The text a template writes for an assistant turn that calls a tool: the
// render of [user, assistant call] past the render of [user] with the
// generation prompt, less the end-of-turn marker.
std::string assistantCallText(const std::string& file, const ChatToolCall& call) {
  auto chat = ChatTemplate::fromTemplateString(readTemplate(file), "<s>", "</s>");
  EXPECT_TRUE(chat.ok()) << chat.error().message;
  std::vector<ChatMessage> messages = {{"user", "Weather in Paris?"}};
  ChatOptions options;  // Hermes-3's template needs the tools
  options.tools = {R"({"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})"};
  auto prompt = chat->apply(messages, options);
  ChatMessage answer{"assistant", ""};
  answer.tool_calls = {call};
  messages.push_back(answer);
  options.add_generation_prompt = false;
  auto whole = chat->apply(messages, options);
  EXPECT_TRUE(prompt.ok()) << prompt.error().message;
  EXPECT_TRUE(whole.ok()) << whole.error().message;
  if (!prompt.ok() || !whole.ok()) return {};
  EXPECT_EQ(whole->compare(0, prompt->size(), *prompt), 0) << *whole;
  std::string text = whole->substr(prompt->size());
  for (const char* end : {"<|im_end|>\n", "<|eot_id|>", "</s>"})
    if (text.ends_with(end)) text.resize(text.size() - std::string_view(end).size());
  return text;
}

TEST(ToolCallsTest, ReadsBackWhatEachTemplateWrites) {
  ChatToolCall call;
  call.id = "abcDEF123";  // Mistral's 9-character ids
  call.name = "get_weather";
  call.arguments = R"({"city": "Paris", "days": 2})";
  for (const char* file : {"qwen2.5.jinja", "qwen3.jinja", "hermes-3-tool-use.jinja", "llama-3.3.jinja",
                           "llama-3.2.jinja", "mistral-v0.3.jinja"}) {
    const std::string text = assistantCallText(file, call);
    ParsedAnswer parsed = parseToolCalls(text, toolCallFormatOf(readTemplate(file)));
    ASSERT_EQ(parsed.calls.size(), 1u) << file << ": " << text;
    EXPECT_EQ(parsed.calls[0].name, "get_weather") << file;
    EXPECT_EQ(parsed.calls[0].arguments, json(call.arguments)) << file;
    // Qwen3 writes an empty thinking block before the call.
    EXPECT_TRUE(parsed.content.empty() || parsed.content == "<think>\n\n</think>") << file << ": " << parsed.content;
  }
}

TEST(ToolCallsTest, HermesAnswers) {
  ParsedAnswer p = parseToolCalls(
      "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
      ToolCallFormat::kHermes);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.content, "Let me check.");
  EXPECT_EQ(p.calls[0].name, "a");
  EXPECT_EQ(p.calls[0].arguments, R"({"x":1})");
  EXPECT_EQ(p.calls[1].name, "b");
  // Cut off at EOS before the closing tag.
  p = parseToolCalls("<tool_call>\n{\"name\": \"a\", \"arguments\": {}}", ToolCallFormat::kHermes);
  ASSERT_EQ(p.calls.size(), 1u);
  // Not JSON, or no name: the answer is content.
  for (const char* text : {"<tool_call>\n{\"name\": \"a\", \"arguments\": {</tool_call>",
                           "<tool_call>{\"arguments\": {}}</tool_call>", "Paris is sunny."}) {
    p = parseToolCalls(text, ToolCallFormat::kHermes);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(ToolCallsTest, Llama3JsonAnswers) {
  ParsedAnswer p = parseToolCalls(R"({"name": "a", "parameters": {"q": "x;y"}})", ToolCallFormat::kLlama3Json);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"q":"x;y"})");
  p = parseToolCalls(R"(<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "arguments": {"n": 2}})",
                     ToolCallFormat::kLlama3Json);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[1].name, "b");
  EXPECT_EQ(p.calls[1].arguments, R"({"n":2})");
  for (const char* text : {"The answer is {\"name\": 1}", R"({"title": "not a call"})", "{broken"}) {
    p = parseToolCalls(text, ToolCallFormat::kLlama3Json);
    EXPECT_TRUE(p.calls.empty()) << text;
    EXPECT_EQ(p.content, text);
  }
}

TEST(ToolCallsTest, MistralAnswers) {
  ParsedAnswer p = parseToolCalls(
      R"([TOOL_CALLS] [{"name": "a", "arguments": {"x": 1}, "id": "abcDEF123"}, {"name": "b", "arguments": {}}])",
      ToolCallFormat::kMistral);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].id, "abcDEF123");
  EXPECT_EQ(p.calls[1].id, "");
  EXPECT_EQ(p.content, "");
  p = parseToolCalls("[TOOL_CALLS] [{\"name\": ", ToolCallFormat::kMistral);
  EXPECT_TRUE(p.calls.empty());
}

TEST(ToolCallsTest, NoFormatIsAllContent) {
  ParsedAnswer p = parseToolCalls("<tool_call>{\"name\": \"a\"}</tool_call>", ToolCallFormat::kNone);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "<tool_call>{\"name\": \"a\"}</tool_call>");
}

}  // namespace
}  // namespace kiln
