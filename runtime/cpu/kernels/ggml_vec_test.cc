#include "runtime/cpu/kernels/ggml_vec.h"

#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "runtime/numerics/testing.h"

namespace kiln::cpu {
namespace {

// Each variant this CPU can run; the default is restored afterwards.
class GgmlVecTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!setGgmlVecIsaForTesting(GetParam())) GTEST_SKIP() << "CPU lacks " << GetParam();
  }
  void TearDown() override {
    for (const char* isa : {"avx512", "avx2", "scalar"})
      if (setGgmlVecIsaForTesting(isa)) break;
  }
};

// The lane trees of ggml's reductions, restated from its sources:
//   16 lanes  _mm512_reduce_add_ps (GCC): l + (l+8), then + (l+4), then
//             (0+2) + (1+3)
//   8 lanes   hsum_float_8 / tinyBLAS hsum: l + (l+4), then (0+2) + (1+3)
//   8 lanes   GGML_F32x8_REDUCE's tail: l + (l+4), then hadd twice:
//             (0+1) + (2+3)
float laneTree(const float* v, int lanes, bool hadd_tail) {
  if (lanes == 16) {
    float t3[8], t6[4];
    for (int l = 0; l < 8; ++l) t3[l] = v[l] + v[l + 8];
    for (int l = 0; l < 4; ++l) t6[l] = t3[l] + t3[l + 4];
    return (t6[0] + t6[2]) + (t6[1] + t6[3]);
  }
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = v[l] + v[l + 4];
  return hadd_tail ? (t[0] + t[1]) + (t[2] + t[3]) : (t[0] + t[2]) + (t[1] + t[3]);
}

// ggml_vec_dot_f32, restated: element i of each 4*lanes step feeds
// accumulator (i / lanes) % 4, lane i % lanes; then x0+x2, x1+x3, x0+x1.
float restatedDot(const float* x, const float* y, int64_t n, int lanes) {
  if (lanes == 1) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += double(x[i] * y[i]);
    return float(sum);
  }
  const int64_t step = 4 * lanes, np = n / step * step;
  std::vector<float> acc(static_cast<size_t>(step), 0.0f);
  for (int64_t i = 0; i < np; ++i) acc[size_t(i % step)] = std::fma(x[i], y[i], acc[size_t(i % step)]);
  std::vector<float> folded(static_cast<size_t>(lanes));
  for (int l = 0; l < lanes; ++l)
    folded[size_t(l)] = (acc[size_t(l)] + acc[size_t(2 * lanes + l)]) +
                        (acc[size_t(lanes + l)] + acc[size_t(3 * lanes + l)]);
  float sum = laneTree(folded.data(), lanes, /*hadd_tail=*/true);
  for (int64_t i = np; i < n; ++i) sum = std::fma(x[i], y[i], sum);
  return sum;
}

// tinyBLAS's f32 GEMM element: one accumulator of `lanes` over k, then hsum.
float restatedOneAccumulatorDot(const float* x, const float* y, int64_t n, int lanes) {
  std::vector<float> acc(static_cast<size_t>(lanes), 0.0f);
  for (int64_t i = 0; i < n; ++i) acc[size_t(i % lanes)] = std::fma(x[i], y[i], acc[size_t(i % lanes)]);
  return laneTree(acc.data(), lanes, /*hadd_tail=*/false);
}

TEST_P(GgmlVecTest, DotFollowsGgmlLaneOrder) {
  const GgmlVec& vec = ggmlVec();
  std::mt19937 rng(60);
  for (int64_t n : {1, 7, 32, 64, 100, 128, 200, 576}) {
    std::vector<float> x = testing::randomFloats(rng, size_t(n)), y = testing::randomFloats(rng, size_t(n));
    const float got = vec.dot(x.data(), y.data(), n);
    EXPECT_EQ(got, restatedDot(x.data(), y.data(), n, vec.lanes)) << vec.isa << " n=" << n;
    double exact = 0.0;
    for (int64_t i = 0; i < n; ++i) exact += double(x[size_t(i)]) * y[size_t(i)];
    EXPECT_NEAR(got, exact, 1e-5 * double(n)) << vec.isa << " n=" << n;
  }
}

// out[e] = sum_j p[j] v[j][e]: in vec_dot order it must equal ggml_vec_dot_f32
// over V^T's row e and p, zero-padded as llama.cpp pads its KV length.
TEST_P(GgmlVecTest, WeightedSumIsVTransposeTimesP) {
  const GgmlVec& vec = ggmlVec();
  std::mt19937 rng(61);
  for (int64_t n : {1, 5, 16, 37, 64, 130}) {
    const int64_t d = 64, padded = (n + 255) / 256 * 256;
    std::vector<float> values = testing::randomFloats(rng, size_t(n * d), -2.0f, 2.0f);
    std::vector<float> p = testing::randomFloats(rng, size_t(n), 0.0f, 1.0f);
    std::vector<const float*> rows;
    for (int64_t j = 0; j < n; ++j) rows.push_back(values.data() + j * d);
    std::vector<float> p_padded(size_t(padded), 0.0f), column(size_t(padded), 0.0f);
    std::copy(p.begin(), p.end(), p_padded.begin());
    for (bool one : {false, true}) {
      std::vector<float> out = testing::poisoned(size_t(d));
      vec.weightedSum(p.data(), rows.data(), n, d, one, out.data());
      for (int64_t e = 0; e < d; ++e) {
        for (int64_t j = 0; j < n; ++j) column[size_t(j)] = values[size_t(j * d + e)];
        const float expected =
            one && vec.lanes > 1
                ? restatedOneAccumulatorDot(column.data(), p_padded.data(), padded, vec.lanes)
                : vec.dot(column.data(), p_padded.data(), padded);
        ASSERT_EQ(out[size_t(e)], expected) << vec.isa << " n=" << n << " e=" << e << " one=" << one;
      }
    }
  }
}

// ulps between two finite floats of the same sign.
int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::llabs(int64_t(ia) - int64_t(ib));
}

TEST_P(GgmlVecTest, SoftMaxExpWithinTwoUlpsAndSumsPerVector) {
  const GgmlVec& vec = ggmlVec();
  std::mt19937 rng(62);
  for (int64_t n : {3, 16, 40, 256}) {
    std::vector<float> x = testing::randomFloats(rng, size_t(n), -80.0f, 0.0f);
    x[0] = -INFINITY;  // a masked key
    std::vector<float> y = testing::poisoned(size_t(n));
    const double sum = vec.softMax(y.data(), x.data(), n, 0.0f);
    EXPECT_EQ(y[0], 0.0f);
    for (int64_t i = 1; i < n; ++i)
      EXPECT_LE(ulps(y[size_t(i)], float(std::exp(double(x[size_t(i)])))), 2)
          << vec.isa << " x=" << x[size_t(i)];
    // f64 sum of each vector's f32 lane tree, then the tail one by one.
    double expected = 0.0;
    int64_t i = 0;
    if (vec.lanes > 1)
      for (; i + vec.lanes <= n; i += vec.lanes)
        expected += double(laneTree(y.data() + i, vec.lanes, /*hadd_tail=*/false));
    for (; i < n; ++i) expected += double(y[size_t(i)]);
    EXPECT_EQ(sum, expected) << vec.isa << " n=" << n;
  }
}

TEST_P(GgmlVecTest, SwigluIsSiluTimesUp) {
  const GgmlVec& vec = ggmlVec();
  std::mt19937 rng(63);
  const int64_t n = 1536 + 5;  // a tail past the last full vector
  std::vector<float> x = testing::randomFloats(rng, size_t(n), -20.0f, 20.0f);
  std::vector<float> g = testing::randomFloats(rng, size_t(n), -3.0f, 3.0f);
  std::vector<float> s = testing::poisoned(size_t(n)), y = testing::poisoned(size_t(n));
  vec.silu(s.data(), x.data(), n);
  vec.swiglu(y.data(), x.data(), g.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const size_t at = size_t(i);
    EXPECT_EQ(y[at], s[at] * g[at]) << vec.isa << " i=" << i;
    const double expected = x[at] / (1.0 + std::exp(-double(x[at])));
    EXPECT_NEAR(s[at], expected, 4e-7 * std::fabs(expected) + 1e-30) << vec.isa << " x=" << x[at];
  }
}

INSTANTIATE_TEST_SUITE_P(AllVariants, GgmlVecTest, ::testing::Values("avx512", "avx2", "scalar"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace kiln::cpu
