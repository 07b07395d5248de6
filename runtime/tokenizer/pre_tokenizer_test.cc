#include "runtime/tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include "runtime/tokenizer/tokenizer_vocab.h"

namespace kiln {
namespace {

std::vector<std::string> splitWith(PreTokenizerKind kind,
                                   std::string_view text) {
  auto pre = PreTokenizer::create(preTokenizerRegexes(kind));
  EXPECT_TRUE(pre.ok()) << pre.error().message;
  std::vector<std::string> out;
  for (auto piece : pre->split(text)) out.emplace_back(piece);
  return out;
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizerTest, Gpt2) {
  EXPECT_EQ(splitWith(PreTokenizerKind::kGpt2, "Hello  world"),
            (Pieces{"Hello", " ", " world"}));
  EXPECT_EQ(splitWith(PreTokenizerKind::kGpt2, "don't I'LL"),
            (Pieces{"don", "'t", " I", "'", "LL"}));  // case-sensitive
  EXPECT_EQ(splitWith(PreTokenizerKind::kGpt2, "x=12345;\n\n"),
            (Pieces{"x", "=", "12345", ";", "\n\n"}));
}

TEST(PreTokenizerTest, SmolLMSplitsDigitsFirst) {
  // "\p{N}" runs first: "abc ", "1", "2", "3", " def"; then the GPT-2 regex
  // runs on each piece alone, so "abc " ends in a lone-space piece.
  EXPECT_EQ(splitWith(PreTokenizerKind::kSmolLM, "abc 123 def"),
            (Pieces{"abc", " ", "1", "2", "3", " def"}));
}

TEST(PreTokenizerTest, Llama3GroupsDigitsByThree) {
  EXPECT_EQ(splitWith(PreTokenizerKind::kLlama3, "12345 I'LL"),
            (Pieces{"123", "45", " I", "'LL"}));
}

TEST(PreTokenizerTest, Qwen2SplitsSingleDigits) {
  EXPECT_EQ(splitWith(PreTokenizerKind::kQwen2, "ab12"),
            (Pieces{"ab", "1", "2"}));
}

TEST(PreTokenizerTest, UnicodeClasses) {
  // Cyrillic letters are \p{L}; the ideographic full stop is not.
  EXPECT_EQ(splitWith(PreTokenizerKind::kGpt2, "Привет мир。"),
            (Pieces{"Привет", " мир", "。"}));
}

TEST(PreTokenizerTest, BadRegexIsAnError) {
  auto pre = PreTokenizer::create({"(unclosed"});
  ASSERT_FALSE(pre.ok());
  EXPECT_NE(pre.error().message.find("(unclosed"), std::string::npos);
}

}  // namespace
}  // namespace kiln
