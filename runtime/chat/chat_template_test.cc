#include "runtime/chat/chat_template.h"
#include "test/source_root.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

namespace kiln {
namespace {

// testdata/chat_templates.json: real templates rendered by jinja2
// (test/reference/make_chat_fixtures.py).
nlohmann::json loadFixture() {
  std::ifstream in(checkoutPath("runtime/chat/testdata/chat_templates.json"));
  EXPECT_TRUE(in) << "missing chat_templates.json";
  return nlohmann::json::parse(in, nullptr, false);
}

TEST(ChatTemplateTest, MatchesJinjaRenders) {
  nlohmann::json fixture = loadFixture();
  ASSERT_FALSE(fixture.is_discarded());
  int compared = 0;
  for (const auto& t : fixture["templates"]) {
    const std::string name = t["name"].get<std::string>();
    auto tmpl = ChatTemplate::fromTemplateString(
        t["source"].get<std::string>(), t["bos"].get<std::string>(),
        t["eos"].get<std::string>());
    ASSERT_TRUE(tmpl.ok()) << name << ": " << tmpl.error().message;
    EXPECT_EQ(chatTemplateFamilyName(tmpl->family()),
              t["family"].get<std::string>());
    for (const auto& c : t["cases"]) {
      std::vector<ChatMessage> messages;
      for (const auto& m : c["messages"]) {
        messages.push_back({m["role"].get<std::string>(),
                            m["content"].get<std::string>()});
      }
      auto rendered = tmpl->apply(messages, c["add_generation_prompt"].get<bool>());
      std::string label = name + "/" + c["conversation"].get<std::string>() +
                          (c["add_generation_prompt"].get<bool>() ? "+gen" : "");
      if (c.contains("error")) {
        EXPECT_FALSE(rendered.ok()) << label;
      } else {
        ASSERT_TRUE(rendered.ok()) << label << ": " << rendered.error().message;
        EXPECT_EQ(*rendered, c["expected"].get<std::string>()) << label;
      }
      ++compared;
    }
  }
  EXPECT_GE(compared, 40);
}

TEST(ChatTemplateTest, SmolLM2DefaultSystemPrompt) {
  nlohmann::json fixture = loadFixture();
  const auto& t = fixture["templates"][0];
  auto tmpl = ChatTemplate::fromTemplateString(t["source"].get<std::string>(),
                                               "<|im_start|>", "<|im_end|>");
  ASSERT_TRUE(tmpl.ok());
  EXPECT_EQ(tmpl->defaultSystemPrompt(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face");
}

TEST(ChatTemplateTest, UnrecognisedTemplateNamesItsStartAndFamilies) {
  auto tmpl = ChatTemplate::fromTemplateString(
      "{% for m in messages %}<<SYS>>{{ m.content }}{% endfor %}", "<s>",
      "</s>");
  ASSERT_FALSE(tmpl.ok());
  const std::string& message = tmpl.error().message;
  EXPECT_NE(message.find("{% for m in messages %}<<SYS>>"), std::string::npos)
      << message;
  EXPECT_NE(message.find("chatml"), std::string::npos);
  EXPECT_NE(message.find("llama3"), std::string::npos);
  EXPECT_NE(message.find("mistral"), std::string::npos);
}

TEST(ChatTemplateTest, MistralRejectsSystemRole) {
  auto tmpl = ChatTemplate::fromTemplateString("[INST] x [/INST]", "<s>", "</s>");
  ASSERT_TRUE(tmpl.ok());
  auto rendered = tmpl->apply({{"system", "s"}}, true);
  ASSERT_FALSE(rendered.ok());
  EXPECT_NE(rendered.error().message.find("role 'system'"), std::string::npos);
}

}  // namespace
}  // namespace kiln
