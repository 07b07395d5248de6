#include "runtime/sampling/stop_checker.h"

#include <gtest/gtest.h>

namespace kiln::sampling {
namespace {

// Feeds pieces and returns (all released text, whether it stopped).
std::pair<std::string, bool> feed(StopChecker& checker, const std::vector<std::string>& pieces) {
  std::string out;
  bool stopped = false;
  for (const std::string& piece : pieces) {
    StopUpdate u = checker.append(piece);
    out += u.released;
    stopped = u.stopped;
    if (stopped) break;
  }
  if (!stopped) out += checker.flush();
  return {out, stopped};
}

TEST(StopCheckerTest, StopStringSplitAcrossTokens) {
  StopChecker checker({"<|end|>"});
  StopUpdate a = checker.append("Hello <|e");
  EXPECT_EQ(a.released, "Hello ");  // "<|e" could start the stop string: held
  EXPECT_FALSE(a.stopped);
  EXPECT_EQ(checker.held(), 3u);
  StopUpdate b = checker.append("nd");
  EXPECT_EQ(b.released, "");
  StopUpdate c = checker.append("|> trailing");
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(c.released, "");
  EXPECT_EQ(c.stop_index, 0);
  EXPECT_TRUE(checker.append("more").stopped);
  EXPECT_EQ(checker.flush(), "");
}

TEST(StopCheckerTest, FalseStartIsReleased) {
  StopChecker checker({"<|end|>"});
  EXPECT_EQ(checker.append("a <|e").released, "a ");
  StopUpdate u = checker.append("x");  // "<|ex" cannot start "<|end|>"
  EXPECT_EQ(u.released, "<|ex");
  EXPECT_FALSE(u.stopped);
}

TEST(StopCheckerTest, EarliestOfSeveralStopStringsWins) {
  StopChecker checker({"world", "lo w"});
  auto [text, stopped] = feed(checker, {"hel", "lo", " wor", "ld"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(text, "hel");
}

TEST(StopCheckerTest, OverlappingPrefixesHoldTheLongest) {
  // "aab" in "xaa": suffix "aa" is the longest prefix of the stop string.
  StopChecker checker({"aab"});
  EXPECT_EQ(checker.append("xaa").released, "x");
  StopUpdate u = checker.append("ab");  // pending "aaab" contains "aab" at 1
  EXPECT_TRUE(u.stopped);
  EXPECT_EQ(u.released, "a");
}

TEST(StopCheckerTest, EveryByteSplitGivesTheSameResult) {
  const std::string text = "The answer is 42.\nUser: next question";
  for (size_t cut1 = 0; cut1 <= text.size(); ++cut1) {
    for (size_t cut2 = cut1; cut2 <= text.size(); cut2 += 3) {
      StopChecker checker({"\nUser:", "never"});
      auto [out, stopped] = feed(checker, {text.substr(0, cut1), text.substr(cut1, cut2 - cut1),
                                           text.substr(cut2)});
      ASSERT_TRUE(stopped) << cut1 << "," << cut2;
      ASSERT_EQ(out, "The answer is 42.") << cut1 << "," << cut2;
    }
  }
}

TEST(StopCheckerTest, NoStopStringsReleasesEverythingButPartialUtf8) {
  StopChecker checker({});
  EXPECT_EQ(checker.append("ab").released, "ab");
  // "é" is C3 A9: the lone lead byte waits for its continuation.
  EXPECT_EQ(checker.append("c\xC3").released, "c");
  EXPECT_EQ(checker.append("\xA9!").released, "\xC3\xA9!");
  // A 4-byte emoji split 2 + 2.
  EXPECT_EQ(checker.append("\xF0\x9F").released, "");
  EXPECT_EQ(checker.append("\x98\x80").released, "\xF0\x9F\x98\x80");
  EXPECT_EQ(checker.append("\xE2\x82").released, "");
  EXPECT_EQ(checker.flush(), "\xE2\x82");
}

TEST(StopCheckerTest, NoMatchFlushesHeldText) {
  StopChecker checker({"STOP"});
  auto [text, stopped] = feed(checker, {"go ", "ST", "O"});
  EXPECT_FALSE(stopped);
  EXPECT_EQ(text, "go STO");
}

}  // namespace
}  // namespace kiln::sampling
