#include "runtime/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include "runtime/tokenizer/utf8.h"

namespace kiln {
namespace {

using Ids = std::vector<int32_t>;

// Byte-level vocabulary small enough to follow by hand. "Ġ" is the GPT-2
// alphabet's stand-in for a space byte.
//   0 <|endoftext|> (control)   1 a   2 b   3 c   4 Ġ   5 ab   6 bc
//   7 abc   8 Ġab   9 Ġa   10 ï¿½ (U+FFFD's bytes EF BF BD in the alphabet)
//   11 ï   12 ¿   13 ½   14 ï¿
// Merges by rank: 0 "a b", 1 "Ġ a", 2 "b c", 3 "ab c", 4 "Ġa b", 5 "ï ¿",
// 6 "ï¿ ½".
TokenizerVocab tinyByteLevelVocab() {
  TokenizerVocab v;
  v.model = TokenizerModel::kByteLevelBpe;
  v.pre = PreTokenizerKind::kGpt2;
  v.tokens = {"<|endoftext|>", "a",  "b",  "c",  "\xC4\xA0", "ab",
              "bc",            "abc", "\xC4\xA0" "ab", "\xC4\xA0" "a",
              "\xC3\xAF\xC2\xBF\xC2\xBD", "\xC3\xAF", "\xC2\xBF",
              "\xC2\xBD", "\xC3\xAF\xC2\xBF"};
  v.token_types.assign(v.tokens.size(), TokenType::kNormal);
  v.token_types[0] = TokenType::kControl;
  v.merges = {{"a", "b"},
              {"\xC4\xA0", "a"},
              {"b", "c"},
              {"ab", "c"},
              {"\xC4\xA0" "a", "b"},
              {"\xC3\xAF", "\xC2\xBF"},
              {"\xC3\xAF\xC2\xBF", "\xC2\xBD"}};
  v.bos_id = v.eos_id = 0;
  return v;
}

Tokenizer makeTokenizer(TokenizerVocab vocab) {
  auto tok = Tokenizer::create(std::move(vocab));
  EXPECT_TRUE(tok.ok()) << tok.error().message;
  return tok.take();
}

TEST(ByteLevelBpeTest, MergesByRank) {
  Tokenizer tok = makeTokenizer(tinyByteLevelVocab());
  // a b c: "a b" (rank 0) first -> ab c; then "ab c" (rank 3) -> abc.
  EXPECT_EQ(tok.encode("abc"), (Ids{7}));
  // b c a b: "a b" (rank 0) beats "b c" (rank 2): b c ab, then bc ab.
  EXPECT_EQ(tok.encode("bcab"), (Ids{6, 5}));
  // Ġ a b: "a b" (rank 0) beats "Ġ a" (rank 1), leaving Ġ ab; there is no
  // "Ġ ab" merge, so Ġab (8) is never reached. Left-to-right greedy merging
  // would wrongly give [8].
  EXPECT_EQ(tok.encode(" ab"), (Ids{4, 5}));
  // The regex splits "a b" into "a" and " b"; merges never cross words.
  EXPECT_EQ(tok.encode("a b"), (Ids{1, 4, 2}));
}

TEST(ByteLevelBpeTest, UnknownCharactersAreDropped) {
  // No token and no unknown token for 'd': llama.cpp drops it too.
  Tokenizer tok = makeTokenizer(tinyByteLevelVocab());
  EXPECT_EQ(tok.encode("abd"), (Ids{5}));
}

TEST(ByteLevelBpeTest, InvalidUtf8BecomesReplacementCharacter) {
  // 0xFF can never start a character; it is encoded as U+FFFD (token 10).
  Tokenizer tok = makeTokenizer(tinyByteLevelVocab());
  EXPECT_EQ(tok.encode("a\xFF" "b"), (Ids{1, 10, 2}));
  EXPECT_EQ(tok.encode("\xF0\x9F"), (Ids{10, 10}));  // truncated emoji
}

TEST(ByteLevelBpeTest, DecodeMapsAlphabetBackToBytes) {
  Tokenizer tok = makeTokenizer(tinyByteLevelVocab());
  EXPECT_EQ(tok.decode(Ids{8, 6}), " abbc");
  EXPECT_EQ(tok.decode(Ids{1, 0}), "a<|endoftext|>");
  EXPECT_EQ(tok.decode(Ids{1, 0}, {.skip_special = true}), "a");
  EXPECT_EQ(tok.decode(Ids{99}), "\xEF\xBF\xBD");  // out of range
  EXPECT_EQ(tok.tokenText(8), "\xC4\xA0" "ab");
}

TEST(ByteLevelBpeTest, SpecialTokensOnlyWhenParsed) {
  Tokenizer tok = makeTokenizer(tinyByteLevelVocab());
  EXPECT_EQ(tok.encode("a<|endoftext|>b", {.parse_special = true}),
            (Ids{1, 0, 2}));
  Ids plain = tok.encode("a<|endoftext|>b");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 0), 0);
  EXPECT_EQ(tok.findSpecialToken("<|endoftext|>"), 0);
  EXPECT_EQ(tok.findSpecialToken("ab"), std::nullopt);
}

TEST(ByteLevelBpeTest, UserDefinedTokensAlwaysParsed) {
  TokenizerVocab v = tinyByteLevelVocab();
  v.tokens.push_back("<tool>");
  v.token_types.push_back(TokenType::kUserDefined);
  Tokenizer tok = makeTokenizer(std::move(v));
  EXPECT_EQ(tok.encode("a<tool>"), (Ids{1, 15}));
}

TEST(ByteLevelBpeTest, BosAddedWhenVocabAsks) {
  TokenizerVocab v = tinyByteLevelVocab();
  v.add_bos = true;
  Tokenizer tok = makeTokenizer(std::move(v));
  EXPECT_EQ(tok.encode("ab"), (Ids{0, 5}));
  EXPECT_EQ(tok.encode("ab", {.add_special = false}), (Ids{5}));
}

TEST(ByteLevelBpeTest, MergeNamingUnknownTokenIsAnError) {
  TokenizerVocab v = tinyByteLevelVocab();
  v.merges.push_back({"a", "z"});
  auto tok = Tokenizer::create(std::move(v));
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.error().message.find("merge #7 'a z'"), std::string::npos)
      << tok.error().message;
}

TEST(ByteLevelBpeTest, BadSpecialIdIsAnError) {
  TokenizerVocab v = tinyByteLevelVocab();
  v.eos_id = 1000;
  auto tok = Tokenizer::create(std::move(v));
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.error().message.find("eos token id 1000"), std::string::npos);
}

// SentencePiece vocabulary ("▁" is U+2581):
//   0 <unk>  1 <s>  2 </s>  3 ▁  4 a  5 b  6 ▁a (-2)  7 ab (-1)  8 ▁ab (-3)
//   9 <0xC3>  10 <0xA9>  11 c
// Merges happen by the score of the merged piece, highest first.
TokenizerVocab tinySentencePieceVocab() {
  TokenizerVocab v;
  v.model = TokenizerModel::kSentencePiece;
  v.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b",
              "\xE2\x96\x81" "a", "ab", "\xE2\x96\x81" "ab", "<0xC3>",
              "<0xA9>", "c"};
  v.scores = {0, 0, 0, -10, -10, -10, -2, -1, -3, 0, 0, -10};
  v.token_types = {TokenType::kUnknown, TokenType::kControl,
                   TokenType::kControl, TokenType::kNormal,
                   TokenType::kNormal,  TokenType::kNormal,
                   TokenType::kNormal,  TokenType::kNormal,
                   TokenType::kNormal,  TokenType::kByte,
                   TokenType::kByte,    TokenType::kNormal};
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  v.add_space_prefix = true;
  return v;
}

TEST(SentencePieceTest, MergesByScore) {
  Tokenizer tok = makeTokenizer(tinySentencePieceVocab());
  // "ab" -> "▁ab": candidates ▁a (-2) and ab (-1); ab wins -> ▁ ab; then
  // ▁ab (-3) is a token -> one piece.
  EXPECT_EQ(tok.encode("ab"), (Ids{1, 8}));
  // "ba" -> "▁ba": neither ▁b nor ba is a token.
  EXPECT_EQ(tok.encode("ba"), (Ids{1, 3, 5, 4}));
  // Spaces become ▁: "a a" -> "▁a▁a".
  EXPECT_EQ(tok.encode("a a", {.add_special = false}), (Ids{6, 6}));
}

TEST(SentencePieceTest, ByteFallback) {
  Tokenizer tok = makeTokenizer(tinySentencePieceVocab());
  // é (C3 A9) is not a piece: it falls back to <0xC3> <0xA9>.
  EXPECT_EQ(tok.encode("\xC3\xA9"), (Ids{1, 3, 9, 10}));
  // 'd' has no piece and no byte token: <unk>.
  EXPECT_EQ(tok.encode("d"), (Ids{1, 3, 0}));
  EXPECT_EQ(tok.decode(Ids{9, 10}), "\xC3\xA9");
}

TEST(SentencePieceTest, DecodeDropsPrefixSpace) {
  Tokenizer tok = makeTokenizer(tinySentencePieceVocab());
  EXPECT_EQ(tok.decode(Ids{8, 6}), "ab a");
  EXPECT_EQ(tok.decode(Ids{1, 8}), "<s> ab");
  EXPECT_EQ(tok.decode(Ids{1, 8}, {.skip_special = true}), "ab");
}

TEST(SentencePieceTest, SpacePrefixAfterSpecialTokens) {
  Tokenizer tok = makeTokenizer(tinySentencePieceVocab());
  // Text after a special token gets the prefix space again (llama.cpp).
  EXPECT_EQ(tok.encode("ab</s>ab", {.parse_special = true}),
            (Ids{1, 8, 2, 8}));
}

TEST(SentencePieceTest, MergesByRankWhenGiven) {
  // tokenizer.json vocabularies list merges instead of scores: "▁ a" has
  // rank 0, so ▁a forms before ab and "▁a b" finishes the word.
  TokenizerVocab v = tinySentencePieceVocab();
  v.scores.clear();
  v.merges = {{"\xE2\x96\x81", "a"}, {"a", "b"}, {"\xE2\x96\x81" "a", "b"}};
  Tokenizer tok = makeTokenizer(std::move(v));
  EXPECT_EQ(tok.encode("ab"), (Ids{1, 8}));
  EXPECT_EQ(tok.encode("ba", {.add_special = false}), (Ids{3, 5, 4}));
}

}  // namespace
}  // namespace kiln
