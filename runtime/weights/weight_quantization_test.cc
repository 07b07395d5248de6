#include "runtime/weights/weight_quantization.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/numerics/quant.h"
#include "runtime/numerics/weight_type.h"

namespace kiln {
namespace {

std::vector<float> randomMatrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(size_t(rows * cols));
  for (float& v : w) v = normal(rng);
  return w;
}

// Expected code for x under scale s, clamped to [lo, hi] (round half to even).
int expectedCode(float x, float s, int lo, int hi) {
  double q = std::nearbyint(double(x) / double(s));
  return int(std::min(double(hi), std::max(double(lo), q)));
}

TEST(WeightQuantization, Int8PerChannelPacksQ8BlocksWithTheRowScale) {
  const int64_t rows = 3, cols = 96;
  std::vector<float> w = randomMatrix(rows, cols, 7);
  w[5] = 9.0f;  // a row with an outlier sets that row's scale
  auto q = quantizeWeight("int8", 0, w.data(), rows, cols);
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->packed_type, formats::ElementType::Q8_0);
  ASSERT_EQ(q->scales.size(), size_t(rows));
  std::vector<float> back(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(w[size_t(r * cols + c)]));
    const float scale = amax / 127.0f;
    EXPECT_FLOAT_EQ(q->scales[size_t(r)], scale);
    const float stored = f16ToF32(f32ToF16(scale));
    const auto* row = q->packed.get() + r * (cols / 32) * sizeof(BlockQ8_0);
    ASSERT_TRUE(dequantizeRow(WeightType::Q8_0, row, back.data(), cols).ok());
    for (int64_t c = 0; c < cols; ++c)
      EXPECT_EQ(back[size_t(c)], expectedCode(w[size_t(r * cols + c)], scale, -127, 127) * stored)
          << "row " << r << " col " << c;
  }
}

TEST(WeightQuantization, Int4PerGroupPacksQ4BlocksWithTheGroupScale) {
  const int64_t rows = 2, cols = 128, group = 64;
  std::vector<float> w = randomMatrix(rows, cols, 11);
  auto q = quantizeWeight("int4", group, w.data(), rows, cols);
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->packed_type, formats::ElementType::Q4_0);
  ASSERT_EQ(q->scales.size(), size_t(rows * cols / group));
  std::vector<float> back(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const auto* row = q->packed.get() + r * (cols / 32) * sizeof(BlockQ4_0);
    ASSERT_TRUE(dequantizeRow(WeightType::Q4_0, row, back.data(), cols).ok());
    for (int64_t g = 0; g < cols / group; ++g) {
      float amax = 0;
      for (int64_t c = g * group; c < (g + 1) * group; ++c)
        amax = std::max(amax, std::fabs(w[size_t(r * cols + c)]));
      const float scale = amax / 7.0f;
      EXPECT_FLOAT_EQ(q->scales[size_t(r * (cols / group) + g)], scale);
      const float stored = f16ToF32(f32ToF16(scale));
      for (int64_t c = g * group; c < (g + 1) * group; ++c)
        EXPECT_EQ(back[size_t(c)], expectedCode(w[size_t(r * cols + c)], scale, -8, 7) * stored)
            << "row " << r << " col " << c;
    }
  }
}

TEST(WeightQuantization, E4m3RoundingMatchesTheFormat) {
  // e4m3fn: 3 mantissa bits, bias 7, largest finite 448, subnormal step 2^-9.
  EXPECT_EQ(roundToE4m3(1.0f), 1.0f);
  EXPECT_EQ(roundToE4m3(0.1f), 0.1015625f);       // 13 * 2^-7
  EXPECT_EQ(roundToE4m3(17.0f), 16.0f);           // step 2 at 16: a tie rounds to even
  EXPECT_EQ(roundToE4m3(-19.0f), -20.0f);
  EXPECT_EQ(roundToE4m3(448.0f), 448.0f);
  EXPECT_EQ(roundToE4m3(1000.0f), 448.0f);        // saturates, no infinity in e4m3fn
  EXPECT_EQ(roundToE4m3(0.001f), 0.001953125f);   // one subnormal step
  EXPECT_EQ(roundToE4m3(0.0004f), 0.0f);
}

TEST(WeightQuantization, Fp8PerChannelScalesRowsToTheFormatRange) {
  const int64_t rows = 2, cols = 40;
  std::vector<float> w = randomMatrix(rows, cols, 3);
  auto q = quantizeWeight("fp8e4m3", 0, w.data(), rows, cols);
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(q->packed_type, formats::ElementType::F32);
  const auto* values = reinterpret_cast<const float*>(q->packed.get());
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = q->scales[size_t(r)];
    for (int64_t c = 0; c < cols; ++c) {
      const float x = w[size_t(r * cols + c)];
      EXPECT_EQ(values[r * cols + c], roundToE4m3(x / scale) * scale);
      // e4m3's relative rounding error is at most 2^-4 in the normal range.
      EXPECT_NEAR(values[r * cols + c], x, std::fabs(x) / 16 + scale * 0.002f);
    }
  }
}

TEST(WeightQuantization, BadSchemesAndShapesAreErrors) {
  std::vector<float> w(64, 1.0f);
  auto unknown = quantizeWeight("int3", 0, w.data(), 2, 32);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().message,
            "quantize: scheme 'int3' is unknown: expected int8, int4 or fp8e4m3");
  auto group = quantizeWeight("int4", 48, w.data(), 1, 64);
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.error().message,
            "quantize: int4 group 48 for rows of 64 elements: expected a multiple of 32 that "
            "divides the row");
  auto cols = quantizeWeight("int8", 0, w.data(), 2, 30);
  ASSERT_FALSE(cols.ok());
  EXPECT_EQ(cols.error().message, "quantize: int8 rows of 30 elements: expected a multiple of 32");
}

}  // namespace
}  // namespace kiln
