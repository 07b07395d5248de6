#include "runtime/tokenizer/tokenizer_json.h"

#include <gtest/gtest.h>

#include "runtime/tokenizer/tokenizer.h"

namespace kiln {
namespace {

using Ids = std::vector<int32_t>;

// SmolLM-style tokenizer.json: individual digits, then ByteLevel with the
// GPT-2 regex. `merges` is spliced in so both merge spellings can be tried.
std::string byteLevelJson(const std::string& merges) {
  return R"({
    "added_tokens": [
      {"id": 0, "content": "<|endoftext|>", "special": true},
      {"id": 9, "content": "<tool>", "special": false}
    ],
    "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Digits", "individual_digits": true},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}
    ]},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {
      "<|endoftext|>": 0, "a": 1, "b": 2, "ab": 3, "1": 4, "2": 5,
      "\u0120": 6, "\u0120a": 7, "\u0120ab": 8},
      "merges": )" + merges + R"(}
  })";
}

TEST(TokenizerJsonTest, BothMergeSpellingsAgree) {
  auto strings = vocabFromTokenizerJsonText(
      byteLevelJson(R"(["a b", "\u0120 a", "\u0120a b"])"), "t.json");
  auto lists = vocabFromTokenizerJsonText(
      byteLevelJson(R"([["a", "b"], ["\u0120", "a"], ["\u0120a", "b"]])"),
      "t.json");
  ASSERT_TRUE(strings.ok()) << strings.error().message;
  ASSERT_TRUE(lists.ok()) << lists.error().message;
  EXPECT_EQ(strings->merges, lists->merges);
  EXPECT_EQ(strings->model, TokenizerModel::kByteLevelBpe);
  EXPECT_EQ(strings->pre_regexes.size(), 2u);  // digits, then GPT-2
  EXPECT_EQ(strings->token_types[0], TokenType::kControl);
  EXPECT_EQ(strings->token_types[9], TokenType::kUserDefined);

  auto tok = Tokenizer::create(strings.take());
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  // "ab 12": "ab" | " " | "1" | "2" ("a b" rank 0 -> ab).
  EXPECT_EQ(tok->encode("ab 12"), (Ids{3, 6, 4, 5}));
  // " ab": "a b" (0) beats "Ġ a" (1): Ġ ab, no further merge.
  EXPECT_EQ(tok->encode(" ab<tool>"), (Ids{6, 3, 9}));
}

TEST(TokenizerJsonTest, SentencePieceStyle) {
  const char* json = R"({
    "added_tokens": [{"id": 1, "content": "<s>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "\u2581"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": null,
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}}]},
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
      "vocab": {"<unk>": 0, "<s>": 1, "\u2581": 2, "a": 3, "\u2581a": 4,
                "<0x21>": 5},
      "merges": ["\u2581 a"]}
  })";
  auto vocab = vocabFromTokenizerJsonText(json, "spm.json");
  ASSERT_TRUE(vocab.ok()) << vocab.error().message;
  EXPECT_EQ(vocab->model, TokenizerModel::kSentencePiece);
  EXPECT_TRUE(vocab->add_space_prefix);
  EXPECT_TRUE(vocab->add_bos);
  EXPECT_EQ(vocab->bos_id, 1);
  EXPECT_EQ(vocab->unk_id, 0);
  EXPECT_EQ(vocab->token_types[5], TokenType::kByte);
  auto tok = Tokenizer::create(vocab.take());
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_EQ(tok->encode("a!"), (Ids{1, 4, 5}));  // '!' via <0x21>
}

TEST(TokenizerJsonTest, Errors) {
  auto bad = vocabFromTokenizerJsonText("{not json", "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("x.json"), std::string::npos);

  auto unigram = vocabFromTokenizerJsonText(
      R"({"model": {"type": "Unigram", "vocab": []}})", "u.json");
  ASSERT_FALSE(unigram.ok());
  EXPECT_NE(unigram.error().message.find("Unigram"), std::string::npos);

  auto merge = vocabFromTokenizerJsonText(byteLevelJson(R"([42])"), "m.json");
  ASSERT_FALSE(merge.ok());
  EXPECT_NE(merge.error().message.find("model.merges[0]"), std::string::npos);

  // An added token's id must be an integer: a float (1e39 overflows int64)
  // is refused, not converted.
  for (const char* id : {"1e39", "1.5"}) {
    auto added = vocabFromTokenizerJsonText(
        std::string(R"({"added_tokens": [{"id": )") + id +
            R"(, "content": "<s>"}], "model": {"type": "BPE", "vocab": {"a": 0}}})",
        "a.json");
    ASSERT_FALSE(added.ok()) << id;
    EXPECT_NE(added.error().message.find("expected an integer id"),
              std::string::npos)
        << added.error().message;
  }

  auto missing = vocabFromTokenizerJson("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("/nonexistent/tokenizer.json"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln
