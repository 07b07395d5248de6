#include "runtime/tokenizer/gguf_vocab.h"

#include <gtest/gtest.h>

#include <cstring>

#include "runtime/tokenizer/tokenizer.h"

namespace kiln {
namespace {

using formats::GgufValueType;

// Writes just enough GGUF v3 (metadata only, no tensors) to feed
// vocabFromGguf through the real reader.
class GgufBuilder {
 public:
  GgufBuilder& string(const std::string& key, const std::string& value) {
    header(key, GgufValueType::kString);
    putString(value);
    ++count_;
    return *this;
  }
  GgufBuilder& uint32(const std::string& key, uint32_t value) {
    header(key, GgufValueType::kUInt32);
    put(value);
    ++count_;
    return *this;
  }
  GgufBuilder& boolean(const std::string& key, bool value) {
    header(key, GgufValueType::kBool);
    put(static_cast<uint8_t>(value));
    ++count_;
    return *this;
  }
  GgufBuilder& strings(const std::string& key,
                       const std::vector<std::string>& values) {
    header(key, GgufValueType::kArray);
    put(static_cast<uint32_t>(GgufValueType::kString));
    put(static_cast<uint64_t>(values.size()));
    for (const auto& v : values) putString(v);
    ++count_;
    return *this;
  }
  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out;
    auto append = [&](const void* p, size_t n) {
      auto* b = static_cast<const uint8_t*>(p);
      out.insert(out.end(), b, b + n);
    };
    append("GGUF", 4);
    uint32_t version = 3;
    uint64_t tensors = 0;
    append(&version, 4);
    append(&tensors, 8);
    append(&count_, 8);
    out.insert(out.end(), body_.begin(), body_.end());
    out.resize((out.size() + 31) / 32 * 32, 0);
    return out;
  }

 private:
  template <typename T>
  void put(T value) {
    uint8_t raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    body_.insert(body_.end(), raw, raw + sizeof(T));
  }
  void putString(const std::string& s) {
    put(static_cast<uint64_t>(s.size()));
    body_.insert(body_.end(), s.begin(), s.end());
  }
  void header(const std::string& key, GgufValueType type) {
    putString(key);
    put(static_cast<uint32_t>(type));
  }
  std::vector<uint8_t> body_;
  uint64_t count_ = 0;
};

// A valid byte-level tokenizer section; `pre` varies per test.
GgufBuilder smallGpt2(const std::string& pre = "smollm") {
  GgufBuilder b;
  b.string("tokenizer.ggml.model", "gpt2")
      .string("tokenizer.ggml.pre", pre)
      .strings("tokenizer.ggml.tokens", {"<|endoftext|>", "a", "b", "ab", "1"})
      .strings("tokenizer.ggml.merges", {"a b"})
      .uint32("tokenizer.ggml.eos_token_id", 0);
  return b;
}

Result<TokenizerVocab> load(const std::vector<uint8_t>& bytes) {
  auto gguf = formats::GgufFile::openBuffer(bytes, "test.gguf");
  if (!gguf.ok()) return gguf.error();
  return vocabFromGguf(*gguf);
}

TEST(GgufVocabTest, LoadsByteLevelVocab) {
  auto bytes = smallGpt2().bytes();
  auto vocab = load(bytes);
  ASSERT_TRUE(vocab.ok()) << vocab.error().message;
  EXPECT_EQ(vocab->model, TokenizerModel::kByteLevelBpe);
  EXPECT_EQ(vocab->pre, PreTokenizerKind::kSmolLM);
  EXPECT_EQ(vocab->eos_id, 0);
  EXPECT_EQ(vocab->bos_id, -1);
  auto tok = Tokenizer::create(vocab.take());
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_EQ(tok->encode("ab11"), (std::vector<int32_t>{3, 4, 4}));
}

TEST(GgufVocabTest, MissingKeysAreNamed) {
  for (const char* key : {"tokenizer.ggml.model", "tokenizer.ggml.tokens",
                          "tokenizer.ggml.merges"}) {
    GgufBuilder b;
    if (std::string(key) != "tokenizer.ggml.model") {
      b.string("tokenizer.ggml.model", "gpt2");
    }
    if (std::string(key) != "tokenizer.ggml.tokens") {
      b.strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
    }
    if (std::string(key) != "tokenizer.ggml.merges") {
      b.strings("tokenizer.ggml.merges", {"a b"});
    }
    auto bytes = b.bytes();
    auto vocab = load(bytes);
    ASSERT_FALSE(vocab.ok()) << key;
    EXPECT_NE(vocab.error().message.find(key), std::string::npos)
        << vocab.error().message;
  }
}

TEST(GgufVocabTest, BadValuesAreNamed) {
  {
    auto bytes = GgufBuilder()
                     .string("tokenizer.ggml.model", "bert")
                     .bytes();
    auto vocab = load(bytes);
    ASSERT_FALSE(vocab.ok());
    EXPECT_NE(vocab.error().message.find("'bert' is not supported"),
              std::string::npos);
  }
  {
    auto bytes = smallGpt2("klingon").bytes();
    auto vocab = load(bytes);
    ASSERT_FALSE(vocab.ok());
    EXPECT_NE(vocab.error().message.find("tokenizer.ggml.pre"),
              std::string::npos)
        << vocab.error().message;
  }
  {
    auto bytes = smallGpt2().uint32("tokenizer.ggml.bos_token_id", 77).bytes();
    auto vocab = load(bytes);
    ASSERT_FALSE(vocab.ok());
    EXPECT_NE(vocab.error().message.find("bos_token_id"), std::string::npos);
  }
  {
    auto bytes = smallGpt2().string("tokenizer.ggml.add_bos_token", "yes")
                     .bytes();
    auto vocab = load(bytes);
    ASSERT_FALSE(vocab.ok());
    EXPECT_NE(vocab.error().message.find("add_bos_token"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiln
