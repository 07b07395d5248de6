#include "runtime/chat/chat_template.h"
#include "test/source_root.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace kiln {
namespace {

using json = nlohmann::ordered_json;  // tool schemas keep their key order

// testdata/chat_templates.json: the real templates (testdata/templates/)
// rendered by jinja2 as transformers renders them
// (test/reference/make_chat_fixtures.py).
json loadFixture() {
  std::ifstream in(checkoutPath("runtime/chat/testdata/chat_templates.json"));
  EXPECT_TRUE(in) << "missing chat_templates.json";
  return json::parse(in, nullptr, false);
}

std::string readTemplate(const std::string& file) {
  std::ifstream in(checkoutPath("runtime/chat/testdata/templates/" + file), std::ios::binary);
  EXPECT_TRUE(in) << "missing template " << file;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<ChatMessage> toMessages(const json& list) {
  std::vector<ChatMessage> messages;
  for (const json& m : list) {
    ChatMessage message{m["role"].get<std::string>(), m["content"].get<std::string>()};
    if (m.contains("tool_calls")) {
      for (const json& call : m["tool_calls"]) {
        message.tool_calls.push_back({call.value("id", std::string()), call["function"]["name"].get<std::string>(),
                                      call["function"]["arguments"].dump()});
      }
    }
    message.tool_call_id = m.value("tool_call_id", std::string());
    message.name = m.value("name", std::string());
    message.reasoning_content = m.value("reasoning_content", std::string());
    messages.push_back(std::move(message));
  }
  return messages;
}

// The generator's fixed clock, 2025-03-14 12:00 local time.
std::time_t fixedNow() {
  std::tm t{};
  t.tm_year = 2025 - 1900;
  t.tm_mon = 2;
  t.tm_mday = 14;
  t.tm_hour = 12;
  t.tm_isdst = -1;
  return std::mktime(&t);
}

TEST(ChatTemplateTest, MatchesJinja2OnEveryTemplateAndConversation) {
  json fixture = loadFixture();
  ASSERT_FALSE(fixture.is_discarded());
  ASSERT_EQ(fixture["fixed_now"], "2025-03-14T12:00:00");
  const json& conversations = fixture["conversations"];
  int compared = 0, raised = 0;
  for (const json& t : fixture["templates"]) {
    const std::string name = t["name"].get<std::string>();
    auto tmpl = ChatTemplate::fromTemplateString(readTemplate(t["file"].get<std::string>()),
                                                 t["bos"].get<std::string>(), t["eos"].get<std::string>());
    ASSERT_TRUE(tmpl.ok()) << name << ": " << tmpl.error().message;
    for (const json& c : t["cases"]) {
      const json& conversation = conversations[c["conversation"].get<std::string>()];
      ChatOptions options;
      options.add_generation_prompt = c["add_generation_prompt"].get<bool>();
      options.now = fixedNow();
      if (conversation.contains("tools"))
        for (const json& tool : conversation["tools"]) options.tools.push_back(tool.dump());
      if (conversation.contains("kwargs")) options.extra_variables_json = conversation["kwargs"].dump();
      auto rendered = tmpl->apply(toMessages(conversation["messages"]), options);
      const std::string label = name + "/" + c["conversation"].get<std::string>() +
                                (options.add_generation_prompt ? "+gen" : "");
      if (c.contains("error")) {
        ASSERT_FALSE(rendered.ok()) << label << " rendered where jinja2 raised: " << c["error"];
        // raise_exception's message reaches the caller as written; so does
        // jinja2's wording for a missing list element (messages[0] of none).
        // Python's own TypeErrors are worded differently here.
        const std::string expected = c["error"].get<std::string>();
        if (!c.contains("python_error")) {
          EXPECT_NE(rendered.error().message.find(expected), std::string::npos)
              << label << ": " << rendered.error().message;
        }
        ++raised;
      } else {
        ASSERT_TRUE(rendered.ok()) << label << ": " << rendered.error().message;
        EXPECT_EQ(*rendered, c["expected"].get<std::string>()) << label;
      }
      ++compared;
    }
  }
  EXPECT_GE(compared, 300);
  EXPECT_GE(raised, 10);
}

TEST(ChatTemplateTest, BadSyntaxNamesLineAndColumn) {
  auto tmpl = ChatTemplate::fromTemplateString("{% for m in messages %}\n{{ m.content + }}\n{% endfor %}", "<s>",
                                               "</s>");
  ASSERT_FALSE(tmpl.ok());
  EXPECT_EQ(tmpl.error().message, "chat template: line 2 column 16: unexpected '}}', expected an expression");
}

TEST(ChatTemplateTest, UnknownFilterIsNamed) {
  auto tmpl = ChatTemplate::fromTemplateString("{{ messages | shuffle }}", "<s>", "</s>");
  ASSERT_FALSE(tmpl.ok());
  EXPECT_EQ(tmpl.error().message, "chat template: line 1 column 15: unknown filter 'shuffle'");
}

TEST(ChatTemplateTest, RaiseExceptionMessageIsSurfaced) {
  auto tmpl = ChatTemplate::fromTemplateString(readTemplate("gemma-2.jinja"), "<bos>", "<eos>");
  ASSERT_TRUE(tmpl.ok()) << tmpl.error().message;
  auto rendered = tmpl->apply({{"system", "s"}, {"user", "u"}}, true);
  ASSERT_FALSE(rendered.ok());
  EXPECT_EQ(rendered.error().message, "chat template: line 1 column 59: System role not supported");
}

TEST(ChatTemplateTest, ToolCallArgumentsThatAreNotAnObjectStayText) {
  // Qwen3 writes string arguments as they are, and mappings with tojson.
  auto tmpl = ChatTemplate::fromTemplateString(readTemplate("qwen3.jinja"), "", "<|im_end|>");
  ASSERT_TRUE(tmpl.ok()) << tmpl.error().message;
  ChatMessage call{"assistant", ""};
  call.tool_calls.push_back({"c1", "f", "not json"});
  auto rendered = tmpl->apply({{"user", "u"}, call}, false);
  ASSERT_TRUE(rendered.ok()) << rendered.error().message;
  EXPECT_NE(rendered->find("\"arguments\": not json}"), std::string::npos) << *rendered;
}

}  // namespace
}  // namespace kiln
