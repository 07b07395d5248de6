#include "runtime/cpu/kernels/elementwise.h"

#include <gtest/gtest.h>

#include "runtime/numerics/testing.h"

namespace kiln::cpu {
namespace {

TEST(SiluMulTest, AgainstFloat64) {
  std::mt19937 rng(40);
  for (int trial = 0; trial < 10; ++trial) {
    const int64_t tokens = testing::randomInt(rng, 1, 7);
    const int64_t ffn = testing::randomInt(rng, 1, 333);
    std::vector<float> gate_up = testing::randomFloats(rng, size_t(tokens * 2 * ffn), -12.0f, 12.0f);
    std::vector<float> out = testing::poisoned(size_t(tokens * ffn));
    ASSERT_TRUE(siluMul(gate_up.data(), tokens, ffn, out.data()).ok());
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t i = 0; i < ffn; ++i) {
        const double g = gate_up[size_t(t * 2 * ffn + i)];
        const double u = gate_up[size_t(t * 2 * ffn + ffn + i)];
        const double expected = g / (1.0 + std::exp(-g)) * u;
        ASSERT_NEAR(out[size_t(t * ffn + i)], expected, 1e-5 * (1.0 + std::fabs(expected)));
      }
  }
}

// GeGLU with PyTorch's tanh GELU, gate and up in separate rows of a wider stride.
TEST(GeluTanhMulTest, AgainstFloat64) {
  std::mt19937 rng(41);
  for (int trial = 0; trial < 10; ++trial) {
    const int64_t tokens = testing::randomInt(rng, 1, 7);
    const int64_t ffn = testing::randomInt(rng, 1, 333);
    const int64_t stride = ffn + testing::randomInt(rng, 0, 5);
    std::vector<float> gate = testing::randomFloats(rng, size_t(tokens * stride), -12.0f, 12.0f);
    std::vector<float> up = testing::randomFloats(rng, size_t(tokens * stride), -3.0f, 3.0f);
    std::vector<float> out = testing::poisoned(size_t(tokens * ffn));
    ASSERT_TRUE(geluTanhMulSplit(gate.data(), up.data(), stride, tokens, ffn, out.data()).ok());
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t i = 0; i < ffn; ++i) {
        const double g = gate[size_t(t * stride + i)];
        const double u = up[size_t(t * stride + i)];
        const double expected =
            0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))) * u;
        ASSERT_NEAR(out[size_t(t * ffn + i)], expected, 1e-5 * (1.0 + std::fabs(expected)));
      }
  }
  EXPECT_FALSE(geluTanhMulSplit(nullptr, nullptr, 0, 1, 0, nullptr).ok());
}

TEST(AddTest, Elementwise) {
  std::vector<float> a = {1, 2, 3}, b = {10, 20, 30};
  std::vector<float> out = testing::poisoned(3);
  add(a.data(), b.data(), out.data(), 3);
  EXPECT_EQ(out, (std::vector<float>{11, 22, 33}));
}

TEST(SoftmaxTest, AgainstFloat64AndSumsToOne) {
  std::mt19937 rng(41);
  for (int64_t n : {1, 2, 17, 1000}) {
    std::vector<float> x = testing::randomFloats(rng, size_t(n), -30.0f, 30.0f);
    std::vector<float> out = testing::poisoned(size_t(n));
    softmaxRow(x.data(), out.data(), n);
    double max = -INFINITY, sum = 0.0;
    for (float v : x) max = std::max(max, double(v));
    for (float v : x) sum += std::exp(double(v) - max);
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double expected = std::exp(double(x[size_t(i)]) - max) / sum;
      ASSERT_NEAR(out[size_t(i)], expected, 2e-5 * expected + 1e-12);
      total += out[size_t(i)];
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
  }
}

TEST(SoftmaxTest, HandlesMinusInfinity) {
  std::vector<float> x = {-INFINITY, 0.0f, -INFINITY, 0.0f};
  softmaxRow(x.data(), x.data(), 4);
  EXPECT_EQ(x, (std::vector<float>{0.0f, 0.5f, 0.0f, 0.5f}));
}

}  // namespace
}  // namespace kiln::cpu
