#include "runtime/cpu/kernels/embed.h"

#include <gtest/gtest.h>

#include "runtime/numerics/quant.h"
#include "runtime/numerics/testing.h"

namespace kiln::cpu {
namespace {

TEST(EmbedTest, GathersDequantizedRows) {
  std::mt19937 rng(20);
  for (WeightType type : testing::kAllWeightTypes) {
    const int64_t vocab = testing::randomInt(rng, 1, 50);
    const int64_t hidden = isBlockQuantized(type) ? 32 * testing::randomInt(rng, 1, 5)
                                                  : testing::randomInt(rng, 1, 100);
    const int64_t row_bytes = rowBytes(type, hidden);
    std::vector<float> values = testing::randomFloats(rng, size_t(vocab * hidden));
    std::vector<uint8_t> table(size_t(vocab * row_bytes));
    for (int64_t v = 0; v < vocab; ++v)
      ASSERT_TRUE(quantizeRow(type, values.data() + v * hidden, table.data() + v * row_bytes, hidden).ok());
    const int64_t tokens = testing::randomInt(rng, 1, 20);
    std::vector<int32_t> ids(static_cast<size_t>(tokens));
    for (auto& id : ids) id = testing::randomInt(rng, 0, int(vocab - 1));
    std::vector<float> out = testing::poisoned(size_t(tokens * hidden));
    Status s = embed(ids.data(), tokens, table.data(), type, vocab, hidden, out.data());
    ASSERT_TRUE(s.ok()) << s.error().message;
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t i = 0; i < hidden; ++i)
        ASSERT_EQ(double(out[size_t(t * hidden + i)]),
                  double(float(testing::naiveElement(type, table.data() + ids[size_t(t)] * row_bytes, i))))
            << weightTypeName(type) << " token " << t << " element " << i;
  }
}

TEST(EmbedTest, GathersKQuantRows) {
  std::mt19937 rng(24);
  for (WeightType type : testing::kKQuantTypes) {
    const int64_t vocab = 9, hidden = 512, row_bytes = rowBytes(type, hidden);
    const std::vector<uint8_t> table = testing::randomBlocks(rng, type, vocab, hidden);
    const std::vector<int32_t> ids = {3, 0, 8, 3};
    std::vector<float> out = testing::poisoned(ids.size() * size_t(hidden));
    Status s = embed(ids.data(), int64_t(ids.size()), table.data(), type, vocab, hidden, out.data());
    ASSERT_TRUE(s.ok()) << s.error().message;
    for (size_t t = 0; t < ids.size(); ++t)
      for (int64_t i = 0; i < hidden; ++i)
        ASSERT_EQ(double(out[t * size_t(hidden) + size_t(i)]),
                  double(float(testing::naiveElement(type, table.data() + ids[t] * row_bytes, i))))
            << weightTypeName(type) << " token " << t << " element " << i;
  }
  std::vector<float> out(256);
  const std::vector<uint8_t> table(210);
  const int32_t id = 0;
  Status s = embed(&id, 1, table.data(), WeightType::Q6_K, 1, 128, out.data());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "embed: q6_k table with hidden=128 is invalid: expected a multiple of 256");
}

TEST(EmbedTest, OutOfRangeIdNamesIdAndVocab) {
  std::vector<float> table(10 * 4, 1.0f);
  std::vector<float> out = testing::poisoned(3 * 4);
  for (int32_t bad : {10, -1}) {
    std::vector<int32_t> ids = {0, bad, 2};
    Status s = embed(ids.data(), 3, table.data(), WeightType::F32, 10, 4, out.data());
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("token id " + std::to_string(bad)), std::string::npos)
        << s.error().message;
    EXPECT_NE(s.error().message.find("10 (vocab size)"), std::string::npos) << s.error().message;
    EXPECT_TRUE(std::isnan(out[0])) << "nothing is written on error";
  }
}

}  // namespace
}  // namespace kiln::cpu
