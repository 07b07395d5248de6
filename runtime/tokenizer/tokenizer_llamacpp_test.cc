// Tokenizes the fixture strings with the real SmolLM2 GGUF and compares ids
// with llama.cpp's (test/fixtures/llamacpp/tokenize.json, written by
// test/reference/make_llamacpp_fixtures.py).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "models/formats/gguf_file.h"
#include "runtime/tokenizer/gguf_vocab.h"
#include "runtime/tokenizer/tokenizer.h"
#include "test/source_root.h"

namespace kiln {
namespace {

std::string modelPath() {
  if (const char* dir = std::getenv("KILN_MODEL_DIR")) {
    return std::string(dir) + "/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
  }
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") +
         "/.cache/kiln/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string fromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

class SmolLM2TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = modelPath();
    if (!std::filesystem::exists(path)) {
      const char* require = std::getenv("KILN_REQUIRE_MODELS");
      if (require != nullptr && std::string(require) == "1") {
        FAIL() << "model file missing: " << path
               << " (KILN_REQUIRE_MODELS=1)";
      }
      GTEST_SKIP() << "model file missing: " << path
                   << " (set KILN_REQUIRE_MODELS=1 to fail instead)";
    }
    auto gguf = formats::GgufFile::open(path);
    ASSERT_TRUE(gguf.ok()) << gguf.error().message;
    auto vocab = vocabFromGguf(*gguf);
    ASSERT_TRUE(vocab.ok()) << vocab.error().message;
    auto tok = Tokenizer::create(vocab.take());
    ASSERT_TRUE(tok.ok()) << tok.error().message;
    tokenizer_ = std::make_unique<Tokenizer>(tok.take());

    std::ifstream in(checkoutPath("test/fixtures/llamacpp/tokenize.json"));
    ASSERT_TRUE(in) << "missing fixture " << checkoutPath("test/fixtures/llamacpp")
                    << "/tokenize.json";
    fixture_ = nlohmann::json::parse(in, nullptr, false);
    ASSERT_FALSE(fixture_.is_discarded());
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  nlohmann::json fixture_;
};

TEST_F(SmolLM2TokenizerTest, VocabularyShape) {
  EXPECT_EQ(tokenizer_->vocabSize(), 49152);
  EXPECT_EQ(tokenizer_->bos(), 1);
  EXPECT_EQ(tokenizer_->eos(), 2);
  EXPECT_EQ(tokenizer_->findSpecialToken("<|im_start|>"), 1);
  EXPECT_EQ(tokenizer_->findSpecialToken("<|im_end|>"), 2);
}

TEST_F(SmolLM2TokenizerTest, IdsMatchLlamaCpp) {
  int compared = 0;
  for (const auto& c : fixture_["cases"]) {
    const std::string text = fromHex(c["hex"].get<std::string>());
    EncodeOptions options;
    options.add_special = c["add_bos"].get<bool>();
    options.parse_special = c["special"].get<bool>();
    std::vector<int32_t> expected = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer_->encode(text, options), expected)
        << "case '" << c["name"].get<std::string>() << "'";
    ++compared;
  }
  EXPECT_GE(compared, 25);
}

TEST_F(SmolLM2TokenizerTest, DecodeRoundTrips) {
  for (const auto& c : fixture_["cases"]) {
    if (c["special"].get<bool>() || !c.value("valid_utf8", true)) continue;
    const std::string text = fromHex(c["hex"].get<std::string>());
    EXPECT_EQ(tokenizer_->decode(tokenizer_->encode(text)), text)
        << "case '" << c["name"].get<std::string>() << "'";
    // llama.cpp's own detokenization of its ids, when recorded.
    if (c.contains("detokenized_hex")) {
      EXPECT_EQ(tokenizer_->decode(c["ids"].get<std::vector<int32_t>>()),
                fromHex(c["detokenized_hex"].get<std::string>()))
          << "case '" << c["name"].get<std::string>() << "'";
    }
  }
}

TEST_F(SmolLM2TokenizerTest, StreamingMatchesDecode) {
  for (const auto& c : fixture_["cases"]) {
    std::vector<int32_t> ids = c["ids"].get<std::vector<int32_t>>();
    StreamingDetokenizer stream(*tokenizer_);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    if (c.value("valid_utf8", true)) {
      EXPECT_EQ(streamed, tokenizer_->decode(ids))
          << "case '" << c["name"].get<std::string>() << "'";
    }
  }
}

TEST_F(SmolLM2TokenizerTest, EncodesKilobytesInMilliseconds) {
  // ~16 KB of mixed text from the fixture strings.
  std::string text;
  while (text.size() < 16 * 1024) {
    for (const auto& c : fixture_["cases"]) {
      if (c.value("valid_utf8", true)) text += c["text"].get<std::string>();
    }
  }
  auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> ids = tokenizer_->encode(text);
  double ms = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - start)
                  .count();
  EXPECT_GT(ids.size(), 1000u);
  // Typically a few ms; the bound leaves room for a loaded 2-core machine.
  EXPECT_LT(ms, 250.0) << text.size() << " bytes took " << ms << " ms";
  RecordProperty("encode_ms", std::to_string(ms));
  std::printf("encoded %zu bytes into %zu tokens in %.2f ms\n", text.size(),
              ids.size(), ms);
}

}  // namespace
}  // namespace kiln
