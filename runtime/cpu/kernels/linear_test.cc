#include "runtime/cpu/kernels/linear.h"

#include <gtest/gtest.h>

#include "runtime/cpu/kernels/quant_dot.h"
#include "runtime/numerics/quant.h"
#include "runtime/numerics/testing.h"

namespace kiln::cpu {
namespace {

using testing::naiveElement;

struct Problem {
  int64_t tokens, k, n;
  std::vector<float> x;
  std::vector<uint8_t> w;
  std::vector<float> bias;
};

Problem makeProblem(std::mt19937& rng, WeightType type, int64_t tokens, int64_t k, int64_t n) {
  Problem p{tokens, k, n, testing::randomFloats(rng, size_t(tokens * k)), {}, {}};
  std::vector<float> w = testing::randomFloats(rng, size_t(n * k));
  p.w.resize(size_t(rowBytes(type, k) * n));
  for (int64_t r = 0; r < n; ++r)
    EXPECT_TRUE(quantizeRow(type, w.data() + r * k, p.w.data() + r * rowBytes(type, k), k).ok());
  p.bias = testing::randomFloats(rng, size_t(n));
  return p;
}

// Checks y against a float64 reference built from the stored weight bytes.
// The quantized-dot path also rounds x to 8 bits per 32-element block, so its
// bound adds |w| times half an activation step per element.
void expectMatchesReference(const Problem& p, WeightType type, const std::vector<float>& y,
                            bool with_bias, bool activation_quantized) {
  const int64_t row_bytes = rowBytes(type, p.k);
  for (int64_t t = 0; t < p.tokens; ++t) {
    const float* x = p.x.data() + t * p.k;
    for (int64_t r = 0; r < p.n; ++r) {
      const uint8_t* row = p.w.data() + r * row_bytes;
      double expected = with_bias ? p.bias[r] : 0.0, magnitude = 0.0, quant_bound = 0.0;
      for (int64_t blk = 0; blk < p.k; blk += 32) {
        double amax = 0.0;
        for (int64_t i = blk; i < std::min(p.k, blk + 32); ++i) amax = std::max(amax, double(std::fabs(x[i])));
        for (int64_t i = blk; i < std::min(p.k, blk + 32); ++i) {
          const double wi = naiveElement(type, row, i);
          expected += double(x[i]) * wi;
          magnitude += std::fabs(double(x[i]) * wi);
          quant_bound += std::fabs(wi) * amax / 254.0;
        }
      }
      const double tol = 2e-5 * magnitude + 1e-5 + (activation_quantized ? 1.01 * quant_bound : 0.0);
      const float got = y[size_t(t * p.n + r)];
      ASSERT_FALSE(std::isnan(got)) << "y[" << t << "," << r << "] unwritten";
      ASSERT_NEAR(got, expected, tol) << weightTypeName(type) << " T=" << p.tokens << " K=" << p.k
                                      << " N=" << p.n << " at [" << t << "," << r << "]";
    }
  }
}

TEST(LinearTest, AllTypesAndPathsAgainstFloat64Reference) {
  std::mt19937 rng(10);
  for (WeightType type : testing::kAllWeightTypes) {
    for (int64_t tokens : {1, 2, 3, 5, 8, 9, 17, 33}) {
      const int64_t k = isBlockQuantized(type) ? 32 * testing::randomInt(rng, 1, 12)
                                               : testing::randomInt(rng, 1, 300);
      const int64_t n = testing::randomInt(rng, 1, 150);
      Problem p = makeProblem(rng, type, tokens, k, n);
      for (LinearPath path : {LinearPath::kAuto, LinearPath::kQuantDot, LinearPath::kDequantSgemm}) {
        if (path == LinearPath::kQuantDot && !isBlockQuantized(type)) continue;
        const bool quant = path == LinearPath::kQuantDot ||
                           (path == LinearPath::kAuto && isBlockQuantized(type));
        for (bool with_bias : {false, true}) {
          std::vector<float> y = testing::poisoned(size_t(tokens * n));
          Status s = linearWithPath(p.x.data(), tokens, k, p.w.data(), type, n,
                                    with_bias ? p.bias.data() : nullptr, y.data(), path);
          ASSERT_TRUE(s.ok()) << s.error().message;
          expectMatchesReference(p, type, y, with_bias, quant);
        }
      }
    }
  }
}

TEST(LinearTest, EveryQuantDotIsaAgreesWithScalar) {
  std::mt19937 rng(11);
  const std::string original = quantDotIsa();
  for (WeightType type : {WeightType::Q4_0, WeightType::Q4_1, WeightType::Q8_0}) {
    for (int64_t tokens : {1, 4, 7}) {
      Problem p = makeProblem(rng, type, tokens, 32 * 13, 37);
      ASSERT_TRUE(setQuantDotIsaForTesting("scalar"));
      std::vector<float> expected(size_t(tokens * p.n));
      ASSERT_TRUE(linearWithPath(p.x.data(), tokens, p.k, p.w.data(), type, p.n, nullptr,
                                 expected.data(), LinearPath::kQuantDot).ok());
      for (const char* isa : {"avx2", "avxvnni", "avx512vnni"}) {
        if (!setQuantDotIsaForTesting(isa)) continue;
        std::vector<float> y = testing::poisoned(size_t(tokens * p.n));
        ASSERT_TRUE(linearWithPath(p.x.data(), tokens, p.k, p.w.data(), type, p.n, nullptr,
                                   y.data(), LinearPath::kQuantDot).ok());
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_NEAR(y[i], expected[i], 1e-4 * (1.0 + std::fabs(expected[i])))
              << isa << " " << weightTypeName(type) << " " << i;
      }
    }
  }
  ASSERT_TRUE(setQuantDotIsaForTesting(original.c_str()));
}

TEST(LinearTest, RejectsBadShapes) {
  std::vector<float> x(64), y(64);
  std::vector<uint8_t> w(1024);
  Status s = linear(x.data(), 1, 40, w.data(), WeightType::Q4_1, 2, nullptr, y.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("k=40"), std::string::npos) << s.error().message;
  EXPECT_FALSE(linear(x.data(), 1, 0, w.data(), WeightType::F32, 2, nullptr, y.data()).ok());
  EXPECT_FALSE(linearWithPath(x.data(), 1, 32, w.data(), WeightType::F16, 2, nullptr, y.data(),
                              LinearPath::kQuantDot).ok());
}

TEST(LinearTest, ZeroTokensIsANoOp) {
  std::vector<uint8_t> w(1024);
  EXPECT_TRUE(linear(nullptr, 0, 32, w.data(), WeightType::Q8_0, 2, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace kiln::cpu
