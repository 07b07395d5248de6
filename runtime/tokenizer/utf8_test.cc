#include "runtime/tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace kiln::utf8 {
namespace {

TEST(Utf8Test, ValidSequences) {
  EXPECT_EQ(validSequenceAt("a", 0), 1u);
  EXPECT_EQ(validSequenceAt("\xC3\xA9", 0), 2u);          // é
  EXPECT_EQ(validSequenceAt("\xE4\xB8\xAD", 0), 3u);      // 中
  EXPECT_EQ(validSequenceAt("\xF0\x9F\x98\x80", 0), 4u);  // 😀
  EXPECT_EQ(validSequenceAt("\xC0\xAF", 0), 0u);          // overlong '/'
  EXPECT_EQ(validSequenceAt("\xED\xA0\x80", 0), 0u);      // surrogate
  EXPECT_EQ(validSequenceAt("\xF4\x90\x80\x80", 0), 0u);  // > U+10FFFF
  EXPECT_EQ(validSequenceAt("\xE4\xB8", 0), 0u);          // truncated
}

TEST(Utf8Test, SanitizeReplacesEachBadByte) {
  EXPECT_EQ(sanitize("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(sanitize("\xE4\xB8"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(sanitize("ok \xC3\xA9"), "ok \xC3\xA9");
}

TEST(Utf8Test, IncompleteSequences) {
  std::string emoji = "\xF0\x9F\x98\x80";
  EXPECT_TRUE(isIncompleteSequence(emoji.substr(0, 1), 0));
  EXPECT_TRUE(isIncompleteSequence(emoji.substr(0, 3), 0));
  EXPECT_FALSE(isIncompleteSequence(emoji, 0));  // complete
  EXPECT_FALSE(isIncompleteSequence("\x80", 0));  // lone continuation
  EXPECT_FALSE(isIncompleteSequence("\xE0\x80", 0));  // would be overlong
}

TEST(Utf8Test, ByteLevelAlphabetRoundTrips) {
  // GPT-2's table: space -> U+0120 'Ġ', newline -> U+010A 'Ċ', 'a' -> 'a'.
  EXPECT_EQ(byteLevelEncode(" "), "\xC4\xA0");
  EXPECT_EQ(byteLevelEncode("\n"), "\xC4\x8A");
  EXPECT_EQ(byteLevelEncode("a"), "a");
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(byteLevelDecode(byteLevelEncode(all)), all);
}

}  // namespace
}  // namespace kiln::utf8
