#include "runtime/cpu/kernels/rms_norm.h"

#include <cmath>

#include <gtest/gtest.h>

#include "runtime/numerics/testing.h"

namespace kiln::cpu {
namespace {

TEST(RmsNormTest, WithAndWithoutResidualAgainstFloat64) {
  std::mt19937 rng(30);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t tokens = testing::randomInt(rng, 1, 9);
    const int64_t hidden = testing::randomInt(rng, 1, 700);
    const float eps = trial % 2 ? 1e-5f : 1e-6f;
    const bool use_residual = trial % 3 != 0;
    std::vector<float> x = testing::randomFloats(rng, size_t(tokens * hidden), -4.0f, 4.0f);
    std::vector<float> weight = testing::randomFloats(rng, size_t(hidden), 0.5f, 1.5f);
    std::vector<float> residual = testing::randomFloats(rng, size_t(tokens * hidden), -4.0f, 4.0f);
    const std::vector<float> residual_before = residual;
    std::vector<float> out = testing::poisoned(size_t(tokens * hidden));

    Status s = rmsNormResidual(x.data(), use_residual ? residual.data() : nullptr, weight.data(),
                               eps, tokens, hidden, out.data());
    ASSERT_TRUE(s.ok()) << s.error().message;

    for (int64_t t = 0; t < tokens; ++t) {
      std::vector<double> h(static_cast<size_t>(hidden));
      double sum_sq = 0.0;
      for (int64_t i = 0; i < hidden; ++i) {
        const size_t at = size_t(t * hidden + i);
        h[size_t(i)] = use_residual ? double(residual_before[at]) + double(x[at]) : double(x[at]);
        sum_sq += h[size_t(i)] * h[size_t(i)];
      }
      const double inv_rms = 1.0 / std::sqrt(sum_sq / double(hidden) + double(eps));
      for (int64_t i = 0; i < hidden; ++i) {
        const size_t at = size_t(t * hidden + i);
        if (use_residual) {
          ASSERT_NEAR(residual[at], h[size_t(i)], 1e-6 * (1 + std::fabs(h[size_t(i)])));
        }
        const double expected = h[size_t(i)] * inv_rms * double(weight[size_t(i)]);
        ASSERT_NEAR(out[at], expected, 2e-6 * (1.0 + std::fabs(expected))) << t << "," << i;
      }
    }
  }
}

// ggml's RMS_NORM then MUL, restated step by step: f32 squares summed in
// f64, f32 mean, 1/sqrtf, x * scale, then * weight.
TEST(RmsNormTest, RoundsAsGgmlBitForBit) {
  std::mt19937 rng(31);
  const int64_t tokens = 5, hidden = 576;
  std::vector<float> x = testing::randomFloats(rng, size_t(tokens * hidden), -3.0f, 3.0f);
  std::vector<float> w = testing::randomFloats(rng, size_t(hidden), -0.5f, 0.5f);
  std::vector<float> out = testing::poisoned(x.size());
  ASSERT_TRUE(rmsNormResidual(x.data(), nullptr, w.data(), 1e-5f, tokens, hidden, out.data()).ok());
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = x.data() + t * hidden;
    double sum = 0.0;
    for (int64_t i = 0; i < hidden; ++i) sum += double(row[i] * row[i]);
    const float mean = float(sum / double(hidden));
    const float scale = 1.0f / sqrtf(mean + 1e-5f);
    for (int64_t i = 0; i < hidden; ++i) {
      const float normed = row[i] * scale;
      ASSERT_EQ(out[size_t(t * hidden + i)], normed * w[size_t(i)]) << t << "," << i;
    }
  }
}

TEST(RmsNormTest, OutMayAliasX) {
  std::vector<float> x = {3.0f, 4.0f};
  std::vector<float> w = {1.0f, 2.0f};
  ASSERT_TRUE(rmsNormResidual(x.data(), nullptr, w.data(), 0.0f, 1, 2, x.data()).ok());
  const double rms = std::sqrt(12.5);
  EXPECT_NEAR(x[0], 3.0 / rms, 1e-6);
  EXPECT_NEAR(x[1], 8.0 / rms, 1e-6);
}

TEST(RmsNormTest, RejectsNegativeEps) {
  std::vector<float> x(4), w(4), out(4);
  EXPECT_FALSE(rmsNormResidual(x.data(), nullptr, w.data(), -1.0f, 1, 4, out.data()).ok());
}

}  // namespace
}  // namespace kiln::cpu
