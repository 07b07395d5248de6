// The K-quant GEMMs (q4_k, q5_k, q6_k) of linear(): both paths, the quantized
// dot on every instruction set this CPU runs, against float64 references.
//  - Weights decoded by gguf-py (test/fixtures/quant/kquant, from
//    test/reference/make_kquant_fixtures.py): the outside reference.
//  - Random super-blocks decoded by testing::naiveElement, for many shapes.
// The dequantize + sgemm path is exact up to f32 rounding. The quantized
// dot also rounds x to 8 bits per 256 elements, so it is checked tightly
// against the float64 dot with those same 8-bit activations (emulated here
// from ggml's q8_K rule), and loosely against the exact x.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>

#include <nlohmann/json.hpp>

#include "runtime/cpu/kernels/linear.h"
#include "runtime/cpu/kernels/quant_dot.h"
#include "runtime/numerics/testing.h"
#include "test/source_root.h"

namespace kiln::cpu {
namespace {

// x rounded as the K-quant dot rounds it: per 256 values, the first value of
// largest magnitude `max` gives the step max / -127, and each value becomes
// round-to-even(x * (-127 / max)) steps.
std::vector<double> activationQ8KValues(const float* x, int64_t k) {
  std::vector<double> out(size_t(k), 0.0);
  for (int64_t b = 0; b < k; b += 256) {
    float max = 0.0f, amax = 0.0f;
    for (int64_t i = b; i < b + 256; ++i)
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        max = x[i];
      }
    if (amax == 0.0f) continue;
    const float iscale = -127.0f / max;
    const float step = 1.0f / iscale;
    for (int64_t i = b; i < b + 256; ++i)
      out[size_t(i)] = double(std::nearbyint(iscale * x[i])) * double(step);
  }
  return out;
}

// y = x · Wᵀ for W given by its decoded values w(r, i); checks y from the
// sgemm path and from the quantized dot of every instruction set this CPU
// runs. `what` names the case in failures.
void expectLinearMatches(WeightType type, const std::vector<uint8_t>& w_bytes, int64_t n,
                         int64_t k, const std::vector<float>& x, int64_t tokens,
                         const std::function<double(int64_t, int64_t)>& w,
                         const std::string& what) {
  const std::string original = quantDotIsa();
  std::vector<std::string> runs = {"sgemm"};
  for (const char* isa : {"scalar", "avx2", "avxvnni", "avx512vnni"})
    if (setQuantDotIsaForTesting(isa)) runs.push_back(isa);
  ASSERT_TRUE(setQuantDotIsaForTesting(original.c_str()));
  for (const std::string& run : runs) {
    const bool quantized = run != "sgemm";
    if (quantized) ASSERT_TRUE(setQuantDotIsaForTesting(run.c_str()));
    std::vector<float> y = testing::poisoned(size_t(tokens * n));
    Status s = linearWithPath(x.data(), tokens, k, w_bytes.data(), type, n, nullptr, y.data(),
                              quantized ? LinearPath::kQuantDot : LinearPath::kDequantSgemm);
    ASSERT_TRUE(setQuantDotIsaForTesting(original.c_str()));
    ASSERT_TRUE(s.ok()) << s.error().message;
    for (int64_t t = 0; t < tokens; ++t) {
      const float* xt = x.data() + t * k;
      const std::vector<double> xq = activationQ8KValues(xt, k);
      for (int64_t r = 0; r < n; ++r) {
        double exact = 0.0, with_xq = 0.0, magnitude = 0.0, quant_bound = 0.0;
        for (int64_t i = 0; i < k; ++i) {
          const double wi = w(r, i);
          exact += wi * double(xt[i]);
          with_xq += wi * xq[size_t(i)];
          magnitude += std::fabs(wi * double(xt[i]));
        }
        for (int64_t b = 0; b < k; b += 256) {
          double amax = 0.0;
          for (int64_t i = b; i < b + 256; ++i) amax = std::max(amax, double(std::fabs(xt[i])));
          for (int64_t i = b; i < b + 256; ++i) quant_bound += std::fabs(w(r, i)) * amax / 254.0;
        }
        const float got = y[size_t(t * n + r)];
        ASSERT_FALSE(std::isnan(got)) << what << " y[" << t << "," << r << "] unwritten";
        const double tol = 2e-6 * magnitude + 1e-6;
        if (quantized) {
          ASSERT_NEAR(got, with_xq, tol) << what << " " << run << " at [" << t << "," << r << "]";
          ASSERT_NEAR(got, exact, 1.01 * quant_bound + tol)
              << what << " " << run << " at [" << t << "," << r << "]";
        } else {
          ASSERT_NEAR(got, exact, tol) << what << " sgemm at [" << t << "," << r << "]";
        }
      }
    }
  }
}

std::vector<uint8_t> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

WeightType typeNamed(const std::string& name) {
  return name == "q4_k" ? WeightType::Q4_K : name == "q5_k" ? WeightType::Q5_K : WeightType::Q6_K;
}

TEST(KQuantLinearTest, GgufPyDecodedWeightsAgainstFloat64) {
  const std::string dir = checkoutPath("test/fixtures/quant/kquant");
  std::ifstream meta_in(dir + "/kquant_fixtures.json");
  ASSERT_TRUE(meta_in) << "missing " << dir << "/kquant_fixtures.json";
  nlohmann::json meta = nlohmann::json::parse(meta_in);
  std::mt19937 rng(21);
  int checked = 0;
  for (const auto& fixture : meta["fixtures"]) {
    const std::string name = fixture["type"];
    const WeightType type = typeNamed(name);
    const int64_t n = fixture["rows"], k = fixture["k"];
    const std::vector<uint8_t> blocks = readFile(dir + "/" + fixture["blocks"].get<std::string>());
    const std::vector<uint8_t> raw = readFile(dir + "/" + fixture["dequantized"].get<std::string>());
    ASSERT_EQ(int64_t(blocks.size()), n * rowBytes(type, k)) << name;
    ASSERT_EQ(int64_t(raw.size()), n * k * 4) << name;
    std::vector<float> values(size_t(n * k));
    std::memcpy(values.data(), raw.data(), raw.size());
    for (int64_t tokens : {1, 3, 6}) {
      const std::vector<float> x = testing::randomFloats(rng, size_t(tokens * k), -2.0f, 2.0f);
      expectLinearMatches(type, blocks, n, k, x, tokens,
                          [&](int64_t r, int64_t i) { return double(values[size_t(r * k + i)]); },
                          name + " T=" + std::to_string(tokens));
    }
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

TEST(KQuantLinearTest, RandomSuperBlocksManyShapes) {
  std::mt19937 rng(22);
  for (WeightType type : testing::kKQuantTypes) {
    for (int64_t tokens : {1, 2, 4, 5, 9, 17}) {
      const int64_t k = 256 * testing::randomInt(rng, 1, 4);
      const int64_t n = testing::randomInt(rng, 1, 70);
      const std::vector<uint8_t> w = testing::randomBlocks(rng, type, n, k);
      std::vector<float> x = testing::randomFloats(rng, size_t(tokens * k));
      if (tokens == 2) std::fill(x.begin(), x.begin() + k, 0.0f);  // an all-zero activation row
      const int64_t row_bytes = rowBytes(type, k);
      expectLinearMatches(
          type, w, n, k, x, tokens,
          [&](int64_t r, int64_t i) { return testing::naiveElement(type, w.data() + r * row_bytes, i); },
          std::string(weightTypeName(type)) + " T=" + std::to_string(tokens) +
              " K=" + std::to_string(k) + " N=" + std::to_string(n));
    }
  }
}

TEST(KQuantLinearTest, EveryQuantDotIsaAgreesWithScalar) {
  std::mt19937 rng(23);
  const std::string original = quantDotIsa();
  for (WeightType type : testing::kKQuantTypes) {
    for (int64_t tokens : {1, 4, 7}) {
      const int64_t k = 256 * 3, n = 37;
      const std::vector<uint8_t> w = testing::randomBlocks(rng, type, n, k);
      const std::vector<float> x = testing::randomFloats(rng, size_t(tokens * k));
      ASSERT_TRUE(setQuantDotIsaForTesting("scalar"));
      std::vector<float> expected(size_t(tokens * n));
      ASSERT_TRUE(linearWithPath(x.data(), tokens, k, w.data(), type, n, nullptr, expected.data(),
                                 LinearPath::kQuantDot).ok());
      for (const char* isa : {"avx2", "avxvnni", "avx512vnni"}) {
        if (!setQuantDotIsaForTesting(isa)) continue;
        std::vector<float> y = testing::poisoned(size_t(tokens * n));
        ASSERT_TRUE(linearWithPath(x.data(), tokens, k, w.data(), type, n, nullptr, y.data(),
                                   LinearPath::kQuantDot).ok());
        for (size_t i = 0; i < y.size(); ++i)
          // Same integer sums; the f32 sums of the scale and min terms
          // (which cancel) run in another order.
          ASSERT_NEAR(y[i], expected[i], 1e-4 * (1.0 + std::fabs(expected[i])))
              << isa << " " << weightTypeName(type) << " " << i;
      }
    }
  }
  ASSERT_TRUE(setQuantDotIsaForTesting(original.c_str()));
}

TEST(KQuantLinearTest, ActivationBlocksFollowGgmlQ8K) {
  std::vector<float> x(512);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(0.1 * double(i)));
  x[300] = -3.0f;  // the second block's extreme is negative
  std::vector<ActivationQ8K> a(2);
  quantizeActivationQ8K(x.data(), a.data(), 512);
  // A negative extreme: step max / -127 is positive and the extreme is -127.
  EXPECT_EQ(a[1].qs[300 - 256], -127);
  EXPECT_FLOAT_EQ(a[1].d, 3.0f / 127.0f);
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 16; ++h) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += a[size_t(b)].qs[16 * h + l];
      EXPECT_EQ(a[size_t(b)].sums[h], sum);
    }
}

TEST(KQuantLinearTest, RejectsRowsOfPartialSuperBlocks) {
  std::vector<float> x(384), y(4);
  std::vector<uint8_t> w(1024);
  Status s = linear(x.data(), 1, 288, w.data(), WeightType::Q4_K, 2, nullptr, y.data());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message,
            "linear: q4_k weight with k=288 is invalid: expected k a multiple of 256");
}

}  // namespace
}  // namespace kiln::cpu
