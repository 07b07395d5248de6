#include "runtime/numerics/quant.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <string>

#include "runtime/numerics/testing.h"
#include "test/source_root.h"

namespace kiln {
namespace {

using testing::kAllWeightTypes;
using testing::naiveElement;

std::vector<uint8_t> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::vector<float> readF32(const std::string& path) {
  std::vector<uint8_t> bytes = readFile(path);
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), values.size() * 4);
  return values;
}

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(f16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(f16ToF32(0xc000), -2.0f);
  EXPECT_EQ(f16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(f16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(f16ToF32(0x7c00)));
  EXPECT_EQ(f32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(f32ToF16(65520.0f), 0x7c00);  // tie above the largest half rounds to inf
  EXPECT_EQ(f32ToF16(65519.0f), 0x7bff);
  EXPECT_EQ(f32ToF16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (zero)
  EXPECT_EQ(f32ToF16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp -> 2 (even)
  EXPECT_EQ(f32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(f32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(f32ToF16(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
  EXPECT_EQ(f32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16ToF32(0xbf80), -1.0f);
}

TEST(HalfTest, EveryHalfRoundTripsAndMatchesNaiveDecode) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const double expected = testing::naiveF16(uint16_t(h));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(f16ToF32(uint16_t(h))));
      continue;
    }
    ASSERT_EQ(double(f16ToF32(uint16_t(h))), expected) << h;
    ASSERT_EQ(f32ToF16(f16ToF32(uint16_t(h))), h) << h;
  }
}

TEST(HalfTest, RoundsToNearest) {
  std::mt19937 rng(1);
  for (float x : testing::randomFloats(rng, 10000, -70000.0f, 70000.0f)) {
    const uint16_t h = f32ToF16(x);
    const double got = testing::naiveF16(h);
    if (std::fabs(x) >= 65520.0f) {
      EXPECT_TRUE(std::isinf(got));
      continue;
    }
    // No neighbour of h is closer to x.
    for (int delta : {-1, 1}) {
      const double other = testing::naiveF16(uint16_t(h + delta));
      if (!std::isfinite(other) || ((h + delta) & 0x7fff) == 0x7fff) continue;
      EXPECT_LE(std::fabs(got - x), std::fabs(other - x)) << x;
    }
  }
}

TEST(DequantizeTest, MatchesNaiveDecodeOfRandomBytes) {
  std::mt19937 rng(2);
  for (WeightType type : kAllWeightTypes) {
    const int64_t n = 32 * testing::randomInt(rng, 1, 9);
    std::vector<uint8_t> bytes(size_t(rowBytes(type, n)));
    for (auto& b : bytes) b = uint8_t(rng());
    // Keep scales finite: random exponent bits could make inf/NaN halves.
    if (isBlockQuantized(type)) {
      const int64_t block_bytes = rowBytes(type, 32);
      for (int64_t blk = 0; blk < n / 32; ++blk) {
        bytes[blk * block_bytes + 1] &= 0x3b;
        if (type == WeightType::Q4_1) bytes[blk * block_bytes + 3] &= 0x3b;
      }
    } else if (type != WeightType::F32) {
      for (size_t i = 1; i < bytes.size(); i += 2) bytes[i] &= 0x3b;
    } else {
      for (size_t i = 3; i < bytes.size(); i += 4) bytes[i] &= 0x3f;
    }
    std::vector<float> out = testing::poisoned(size_t(n));
    ASSERT_TRUE(dequantizeRow(type, bytes.data(), out.data(), n).ok());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(double(out[i]), double(float(naiveElement(type, bytes.data(), i))))
          << weightTypeName(type) << " element " << i;
  }
}

TEST(DequantizeTest, KQuantsMatchNaiveDecodeOfRandomBytes) {
  std::mt19937 rng(12);
  for (WeightType type : testing::kKQuantTypes) {
    const int64_t n = 256 * testing::randomInt(rng, 1, 4);
    std::vector<uint8_t> bytes = testing::randomBlocks(rng, type, 1, n);
    std::vector<float> out = testing::poisoned(size_t(n));
    ASSERT_TRUE(dequantizeRow(type, bytes.data(), out.data(), n).ok());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(double(out[i]), double(float(naiveElement(type, bytes.data(), i))))
          << weightTypeName(type) << " element " << i;
  }
}

TEST(DequantizeTest, KQuantRowsAreWholeSuperBlocks) {
  std::vector<uint8_t> bytes(210 * 2);
  std::vector<float> out(512);
  for (WeightType type : testing::kKQuantTypes) {
    Status s = dequantizeRow(type, bytes.data(), out.data(), 288);
    ASSERT_FALSE(s.ok()) << weightTypeName(type);
    EXPECT_EQ(s.error().message, std::string(weightTypeName(type)) +
                                     " row length 288 is invalid: expected a multiple of 256");
    s = quantizeRow(type, out.data(), bytes.data(), 256);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("no quantizer"), std::string::npos) << s.error().message;
  }
  EXPECT_EQ(rowBytes(WeightType::Q4_K, 512), 288);
  EXPECT_EQ(rowBytes(WeightType::Q5_K, 512), 352);
  EXPECT_EQ(rowBytes(WeightType::Q6_K, 512), 420);
  EXPECT_EQ(weightTypeName(WeightType::Q5_K), "q5_k");
}

// Fixtures from test/reference/make_kquant_fixtures.py: random valid
// super-blocks and gguf-py's numpy decoding of them. kiln's values must be
// the same f32 bits.
TEST(QuantFixtureTest, KQuantsDecodeLikeGgufPy) {
  const std::string dir = checkoutPath("test/fixtures/quant/kquant");
  std::ifstream meta_in(dir + "/kquant_fixtures.json");
  ASSERT_TRUE(meta_in) << "missing " << dir << "/kquant_fixtures.json";
  nlohmann::json meta = nlohmann::json::parse(meta_in);
  int checked = 0;
  for (const auto& fixture : meta["fixtures"]) {
    const std::string name = fixture["type"];
    const WeightType type = name == "q4_k"   ? WeightType::Q4_K
                            : name == "q5_k" ? WeightType::Q5_K
                                             : WeightType::Q6_K;
    const int64_t rows = fixture["rows"], k = fixture["k"];
    std::vector<uint8_t> blocks = readFile(dir + "/" + fixture["blocks"].get<std::string>());
    std::vector<float> expected = readF32(dir + "/" + fixture["dequantized"].get<std::string>());
    ASSERT_EQ(int64_t(blocks.size()), rows * rowBytes(type, k)) << name;
    ASSERT_EQ(int64_t(expected.size()), rows * k);
    std::vector<float> got = testing::poisoned(size_t(rows * k));
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_TRUE(
          dequantizeRow(type, blocks.data() + r * rowBytes(type, k), got.data() + r * k, k).ok());
    for (int64_t i = 0; i < rows * k; ++i)
      ASSERT_EQ(bitsOf(got[i]), bitsOf(expected[i])) << name << " element " << i;
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

TEST(DequantizeTest, RejectsPartialBlocks) {
  std::vector<uint8_t> bytes(64);
  std::vector<float> out(40);
  Status s = dequantizeRow(WeightType::Q4_0, bytes.data(), out.data(), 40);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("multiple of 32"), std::string::npos) << s.error().message;
}

// Fixtures from test/reference/make_quant_fixtures.py (gguf-py's numpy
// quantizers): our bytes and decoded values must be identical.
TEST(QuantFixtureTest, MatchesGgufPyBitForBit) {
  const std::string dir = checkoutPath("test/fixtures/quant");
  std::ifstream meta_in(dir + "/quant_fixtures.json");
  ASSERT_TRUE(meta_in) << "missing " << dir << "/quant_fixtures.json";
  nlohmann::json meta = nlohmann::json::parse(meta_in);
  int checked = 0;
  for (const auto& fixture : meta["fixtures"]) {
    const std::string name = fixture["type"];
    const WeightType type = name == "q4_0"   ? WeightType::Q4_0
                            : name == "q4_1" ? WeightType::Q4_1
                                             : WeightType::Q8_0;
    const int64_t n = fixture["n"];
    std::vector<float> input = readF32(dir + "/" + fixture["input"].get<std::string>());
    std::vector<uint8_t> blocks = readFile(dir + "/" + fixture["blocks"].get<std::string>());
    std::vector<float> expected = readF32(dir + "/" + fixture["dequantized"].get<std::string>());
    ASSERT_EQ(int64_t(input.size()), n);
    ASSERT_EQ(int64_t(blocks.size()), rowBytes(type, n)) << name;
    ASSERT_EQ(int64_t(expected.size()), n);

    std::vector<float> got = testing::poisoned(size_t(n));
    ASSERT_TRUE(dequantizeRow(type, blocks.data(), got.data(), n).ok());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(bitsOf(got[i]), bitsOf(expected[i])) << name << " element " << i;

    std::vector<uint8_t> ours(blocks.size(), 0xcd);
    ASSERT_TRUE(quantizeRow(type, input.data(), ours.data(), n).ok());
    for (size_t i = 0; i < blocks.size(); ++i)
      ASSERT_EQ(int(ours[i]), int(blocks[i])) << name << " byte " << i;
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

TEST(QuantizeTest, RoundTripErrorIsWithinHalfAStep) {
  std::mt19937 rng(3);
  const int64_t n = 32 * 20;
  std::vector<float> x = testing::randomFloats(rng, size_t(n), -3.0f, 3.0f);
  for (WeightType type : {WeightType::Q4_0, WeightType::Q4_1, WeightType::Q8_0}) {
    std::vector<uint8_t> bytes(size_t(rowBytes(type, n)));
    ASSERT_TRUE(quantizeRow(type, x.data(), bytes.data(), n).ok());
    std::vector<float> back(static_cast<size_t>(n));
    ASSERT_TRUE(dequantizeRow(type, bytes.data(), back.data(), n).ok());
    for (int64_t blk = 0; blk < n / 32; ++blk) {
      float lo = x[blk * 32], hi = lo, amax = 0;
      for (int j = 0; j < 32; ++j) {
        lo = std::min(lo, x[blk * 32 + j]);
        hi = std::max(hi, x[blk * 32 + j]);
        amax = std::max(amax, std::fabs(x[blk * 32 + j]));
      }
      const double step = type == WeightType::Q8_0   ? amax / 127.0
                          : type == WeightType::Q4_0 ? amax / 8.0
                                                     : (hi - lo) / 15.0;
      // Q4_0 maps the signed extreme to -8, so the opposite end only reaches
      // +7 steps and clips by up to one step; otherwise half a step. Plus the
      // f16 rounding of the scale (and of Q4_1's minimum).
      const double max_error = (type == WeightType::Q4_0 ? 1.0 : 0.5) * step + 5e-3 * amax;
      for (int j = 0; j < 32; ++j)
        EXPECT_LE(std::fabs(back[blk * 32 + j] - x[blk * 32 + j]), max_error)
            << weightTypeName(type);
    }
  }
}

}  // namespace
}  // namespace kiln
