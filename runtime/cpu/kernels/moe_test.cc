#include "runtime/cpu/kernels/moe.h"

#include <gtest/gtest.h>

#include <cmath>

#include "runtime/numerics/testing.h"

namespace kiln::cpu {
namespace {

// Softmax over 4 experts of [0, ln 2, ln 3, ln 4]: probabilities 0.1, 0.2,
// 0.3, 0.4; the top two are experts 3 and 2.
TEST(MoeRouteTest, SoftmaxTopKAndRenormalization) {
  const float logits[4] = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  float weights[2];
  int32_t ids[2];
  moeRoute(logits, 1, 4, 2, /*normalize=*/false, weights, ids);
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 2);
  EXPECT_NEAR(weights[0], 0.4, 1e-6);
  EXPECT_NEAR(weights[1], 0.3, 1e-6);
  moeRoute(logits, 1, 4, 2, /*normalize=*/true, weights, ids);
  EXPECT_NEAR(weights[0], 0.4 / 0.7, 1e-6);
  EXPECT_NEAR(weights[1], 0.3 / 0.7, 1e-6);
}

// The grouped experts against a float64 loop over every (token, k) pair.
TEST(MoeExpertsTest, GroupedEqualsPerTokenFloat64) {
  std::mt19937 rng(25);
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t rows = testing::randomInt(rng, 1, 9), experts = testing::randomInt(rng, 2, 6);
    const int64_t top_k = testing::randomInt(rng, 1, experts), hidden = testing::randomInt(rng, 1, 40);
    const int64_t ffn = testing::randomInt(rng, 1, 50);
    auto x = testing::randomFloats(rng, size_t(rows * hidden), -1.0f, 1.0f);
    auto gate = testing::randomFloats(rng, size_t(experts * ffn * hidden), -0.5f, 0.5f);
    auto up = testing::randomFloats(rng, size_t(experts * ffn * hidden), -0.5f, 0.5f);
    auto down = testing::randomFloats(rng, size_t(experts * hidden * ffn), -0.5f, 0.5f);
    auto logits = testing::randomFloats(rng, size_t(rows * experts), -2.0f, 2.0f);
    std::vector<float> weights(size_t(rows * top_k));
    std::vector<int32_t> ids(size_t(rows * top_k));
    moeRoute(logits.data(), rows, experts, top_k, trial % 2 == 0, weights.data(), ids.data());
    std::vector<float> scratch(size_t(moeScratchFloats(rows, top_k, hidden, ffn)));
    std::vector<float> y = testing::poisoned(size_t(rows * hidden));
    ExpertWeights w{gate.data(), up.data(), down.data(), WeightType::F32, experts, ffn, hidden};
    ASSERT_TRUE(moeExperts(x.data(), rows, weights.data(), ids.data(), top_k, w, scratch, y.data()).ok());
    for (int64_t t = 0; t < rows; ++t) {
      std::vector<double> expected(size_t(hidden), 0.0);
      for (int64_t k = 0; k < top_k; ++k) {
        const int64_t e = ids[size_t(t * top_k + k)];
        std::vector<double> act(static_cast<size_t>(ffn));
        for (int64_t f = 0; f < ffn; ++f) {
          double g = 0, u = 0;
          for (int64_t h = 0; h < hidden; ++h) {
            g += double(gate[size_t((e * ffn + f) * hidden + h)]) * x[size_t(t * hidden + h)];
            u += double(up[size_t((e * ffn + f) * hidden + h)]) * x[size_t(t * hidden + h)];
          }
          act[size_t(f)] = g / (1.0 + std::exp(-g)) * u;
        }
        for (int64_t h = 0; h < hidden; ++h) {
          double d = 0;
          for (int64_t f = 0; f < ffn; ++f) d += double(down[size_t((e * hidden + h) * ffn + f)]) * act[size_t(f)];
          expected[size_t(h)] += weights[size_t(t * top_k + k)] * d;
        }
      }
      for (int64_t h = 0; h < hidden; ++h)
        ASSERT_NEAR(y[size_t(t * hidden + h)], expected[size_t(h)], 1e-5 * (1.0 + std::fabs(expected[size_t(h)])))
            << "trial " << trial << " token " << t << " column " << h;
    }
  }
}

TEST(MoeExpertsTest, RefusesAnExpertOutsideTheTable) {
  const float x[2] = {1, 2}, weights[1] = {1};
  const int32_t ids[1] = {3};
  const float w[4] = {};
  std::vector<float> scratch(size_t(moeScratchFloats(1, 1, 2, 1)));
  float y[2];
  Status status = moeExperts(x, 1, weights, ids, 1, ExpertWeights{w, w, w, WeightType::F32, 2, 1, 2}, scratch, y);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("expert 3, outside the 2 experts"), std::string::npos) << status.error().message;
}

}  // namespace
}  // namespace kiln::cpu
