#include <gtest/gtest.h>

#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/utf8.h"

namespace kiln {
namespace {

// One token per byte of 😀 (F0 9F 98 80) and of é (C3 A9), plus "x", in the
// byte-level alphabet, as a model emits them when no merge covers the
// character.
Tokenizer byteTokenizer() {
  TokenizerVocab v;
  v.model = TokenizerModel::kByteLevelBpe;
  v.pre = PreTokenizerKind::kGpt2;
  for (char byte : std::string("\xF0\x9F\x98\x80\xC3\xA9x")) {
    v.tokens.push_back(utf8::byteLevelEncode(std::string(1, byte)));
  }
  auto tok = Tokenizer::create(std::move(v));
  EXPECT_TRUE(tok.ok()) << tok.error().message;
  return tok.take();
}

TEST(StreamingDetokenizerTest, HoldsBackSplitEmoji) {
  Tokenizer tok = byteTokenizer();
  StreamingDetokenizer stream(tok);
  EXPECT_EQ(stream.push(6), "x");
  EXPECT_EQ(stream.push(0), "");
  EXPECT_EQ(stream.push(1), "");
  EXPECT_EQ(stream.push(2), "");
  EXPECT_EQ(stream.pendingBytes(), 3u);
  EXPECT_EQ(stream.push(3), "\xF0\x9F\x98\x80");
  EXPECT_EQ(stream.push(4), "");
  EXPECT_EQ(stream.push(5), "\xC3\xA9");
  EXPECT_EQ(stream.finish(), "");
}

TEST(StreamingDetokenizerTest, BrokenSequencesBecomeReplacement) {
  Tokenizer tok = byteTokenizer();
  StreamingDetokenizer stream(tok);
  // F0 9F then 'x': the emoji can no longer complete.
  EXPECT_EQ(stream.push(0), "");
  EXPECT_EQ(stream.push(1), "");
  EXPECT_EQ(stream.push(6), "\xEF\xBF\xBD\xEF\xBF\xBDx");
  // A lone continuation byte is never held.
  EXPECT_EQ(stream.push(3), "\xEF\xBF\xBD");
  // An unfinished sequence at the end is flushed as U+FFFD.
  EXPECT_EQ(stream.push(4), "");
  EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD");
}

TEST(StreamingDetokenizerTest, MatchesDecodeOnValidText) {
  Tokenizer tok = byteTokenizer();
  std::vector<int32_t> ids = {6, 0, 1, 2, 3, 6, 4, 5};
  StreamingDetokenizer stream(tok);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.finish();
  EXPECT_EQ(streamed, tok.decode(ids));
}

}  // namespace
}  // namespace kiln
