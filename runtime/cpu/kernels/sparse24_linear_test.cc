#include "runtime/cpu/kernels/sparse24_linear.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/numerics/quant.h"
#include "runtime/numerics/testing.h"

namespace kiln::cpu {
namespace {

// A 2:4 weight built column pair by column pair: random kept columns per
// group of four, values stored as `type`, and its dense float64 twin.
struct SparseWeight {
  std::vector<uint8_t> values;
  std::vector<uint32_t> meta;
  std::vector<double> dense;  // [n, k], from the stored values
};

SparseWeight makeWeight(std::mt19937& rng, WeightType type, int64_t n, int64_t k) {
  SparseWeight w;
  const int64_t half = k / 2;
  std::vector<float> kept = testing::randomFloats(rng, size_t(n * half));
  w.values.resize(size_t(rowBytes(type, half) * n));
  for (int64_t r = 0; r < n; ++r)
    EXPECT_TRUE(quantizeRow(type, kept.data() + r * half, w.values.data() + r * rowBytes(type, half), half).ok());
  std::vector<float> stored(size_t(n * half));
  EXPECT_TRUE(dequantizeRow(type, w.values.data(), stored.data(), n * half).ok());
  static constexpr int kPairs[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
  std::uniform_int_distribution<int> pick(0, 5);
  w.meta.assign(size_t(n * k / 32), 0);
  w.dense.assign(size_t(n * k), 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < k / 4; ++g) {
      const int* pair = kPairs[pick(rng)];
      w.meta[size_t(r * k / 32 + g / 8)] |= uint32_t(pair[0] | pair[1] << 2) << (4 * (g % 8));
      w.dense[size_t(r * k + 4 * g + pair[0])] = stored[size_t(r * half + 2 * g)];
      w.dense[size_t(r * k + 4 * g + pair[1])] = stored[size_t(r * half + 2 * g + 1)];
    }
  return w;
}

TEST(Sparse24Linear, MatchesTheDenseProductOfThePrunedWeight) {
  std::mt19937 rng(11);
  for (WeightType type : {WeightType::F32, WeightType::Q8_0, WeightType::Q4_0})
    for (auto [tokens, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 7, 64}, {3, 40, 576}, {17, 300, 128}}) {
      SCOPED_TRACE(::testing::Message() << weightTypeName(type) << " tokens " << tokens << " n " << n << " k " << k);
      SparseWeight w = makeWeight(rng, type, n, k);
      std::vector<float> x = testing::randomFloats(rng, size_t(tokens * k));
      std::vector<float> bias = testing::randomFloats(rng, size_t(n));
      std::vector<float> y(size_t(tokens * n), std::numeric_limits<float>::quiet_NaN());
      ASSERT_TRUE(sparse24Linear(x.data(), tokens, k, w.values.data(), type, w.meta.data(), n, bias.data(), y.data())
                      .ok());
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t r = 0; r < n; ++r) {
          double want = bias[size_t(r)], scale = 0;
          for (int64_t c = 0; c < k; ++c) {
            want += double(x[size_t(t * k + c)]) * w.dense[size_t(r * k + c)];
            scale += std::fabs(double(x[size_t(t * k + c)]) * w.dense[size_t(r * k + c)]);
          }
          ASSERT_NEAR(y[size_t(t * n + r)], want, 1e-5 * (scale + 1)) << "token " << t << " row " << r;
        }
    }
}

TEST(Sparse24Linear, RefusesBadShapesAndValueTypes) {
  std::vector<float> x(64), y(2);
  std::vector<uint8_t> values(1024);
  std::vector<uint32_t> meta(4);
  auto ragged = sparse24Linear(x.data(), 1, 96, values.data(), WeightType::F32, meta.data(), 2, nullptr, y.data());
  ASSERT_FALSE(ragged.ok());
  EXPECT_NE(ragged.error().message.find("expected k a positive multiple of 64"), std::string::npos);
  auto kquant = sparse24Linear(x.data(), 1, 64, values.data(), WeightType::Q4_K, meta.data(), 2, nullptr, y.data());
  ASSERT_FALSE(kquant.ok());
  EXPECT_NE(kquant.error().message.find("expected f32, q8_0 or q4_0"), std::string::npos);
}

}  // namespace
}  // namespace kiln::cpu
