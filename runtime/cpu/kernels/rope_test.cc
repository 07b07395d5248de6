#include "runtime/cpu/kernels/rope.h"

#include <cmath>

#include <gtest/gtest.h>

#include "runtime/numerics/testing.h"

namespace kiln::cpu {
namespace {

// transformers' rope init in float64, written from the Python source:
// default: inv_freq = 1 / base^(arange(0, dim, 2) / dim)
// linear:  inv_freq / factor
// llama3:  _compute_llama3_parameters (torch.where form kept on purpose).
std::vector<double> referenceInvFreq(const RopeParams& p, int dim) {
  std::vector<double> inv(size_t(dim / 2));
  for (int i = 0; i < dim / 2; ++i) inv[size_t(i)] = 1.0 / std::pow(double(p.theta), double(2 * i) / dim);
  if (p.scaling == RopeScaling::kLinear)
    for (double& f : inv) f /= p.factor;
  if (p.scaling == RopeScaling::kLlama3) {
    const double old_len = p.original_max_position;
    const double low_wavelen = old_len / p.low_freq_factor;
    const double high_wavelen = old_len / p.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2.0 * M_PI / f;
      const double llama = wavelen > low_wavelen ? f / p.factor : f;
      const double smooth = (old_len / wavelen - p.low_freq_factor) /
                            (p.high_freq_factor - p.low_freq_factor);
      const double smoothed = (1.0 - smooth) * llama / p.factor + smooth * llama;
      const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      f = medium ? smoothed : llama;
    }
  }
  return inv;
}

void referenceRope(std::vector<double>& x, int64_t tokens, int heads, int head_dim,
                   const std::vector<int32_t>& pos, const RopeParams& p) {
  const int rot = p.rotary_dim ? p.rotary_dim : head_dim;
  const std::vector<double> inv = referenceInvFreq(p, rot);
  for (int64_t t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h) {
      double* v = x.data() + (t * heads + h) * head_dim;
      for (int i = 0; i < rot / 2; ++i) {
        // kHalf pairs (i, i + rot/2) as rotate_half does; kInterleaved pairs (2i, 2i+1).
        const int a = p.style == RopeStyle::kHalf ? i : 2 * i;
        const int b = p.style == RopeStyle::kHalf ? i + rot / 2 : 2 * i + 1;
        const double angle = pos[size_t(t)] * inv[size_t(i)];
        const double va = v[a], vb = v[b];
        v[a] = va * std::cos(angle) - vb * std::sin(angle);
        v[b] = vb * std::cos(angle) + va * std::sin(angle);
      }
    }
}

TEST(RopeTest, InvFreqMatchesTransformersFormulas) {
  RopeParams llama31;
  llama31.theta = 500000.0f;
  llama31.scaling = RopeScaling::kLlama3;
  llama31.factor = 8.0f;
  llama31.low_freq_factor = 1.0f;
  llama31.high_freq_factor = 4.0f;
  llama31.original_max_position = 8192;
  RopeParams linear;
  linear.scaling = RopeScaling::kLinear;
  linear.factor = 4.0f;
  for (const RopeParams& p : {RopeParams{}, linear, llama31}) {
    Result<std::vector<float>> got = ropeInvFreq(p, 128);
    ASSERT_TRUE(got.ok()) << got.error().message;
    std::vector<double> expected = referenceInvFreq(p, 128);
    ASSERT_EQ(got->size(), expected.size());
    int scaled = 0, kept = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR((*got)[i], expected[i], 2e-6 * expected[i]) << i;
      const double base = 1.0 / std::pow(double(p.theta), 2.0 * double(i) / 128.0);
      scaled += std::fabs(expected[i] - base / p.factor) < 1e-9 * base;
      kept += std::fabs(expected[i] - base) < 1e-9 * base;
    }
    if (p.scaling == RopeScaling::kLlama3) {
      // Llama 3.1 8B: high frequencies kept, the lowest divided by 8, a band between.
      EXPECT_GT(scaled, 10);
      EXPECT_GT(kept, 10);
      EXPECT_LT(scaled + kept, 64);
    }
  }
}

TEST(RopeTest, AllStylesAndScalingsAgainstFloat64) {
  std::mt19937 rng(50);
  for (RopeStyle style : {RopeStyle::kHalf, RopeStyle::kInterleaved}) {
    for (RopeScaling scaling : {RopeScaling::kNone, RopeScaling::kLinear, RopeScaling::kLlama3}) {
      for (int trial = 0; trial < 4; ++trial) {
        RopeParams p;
        p.style = style;
        p.scaling = scaling;
        p.theta = trial % 2 ? 500000.0f : 10000.0f;
        p.factor = 8.0f;
        p.original_max_position = 256;
        const int head_dim = 2 * testing::randomInt(rng, 1, 40);
        p.rotary_dim = trial == 3 ? 2 * testing::randomInt(rng, 1, head_dim / 2) : 0;
        const int heads = testing::randomInt(rng, 1, 5);
        const int64_t tokens = testing::randomInt(rng, 1, 9);
        std::vector<int32_t> pos(static_cast<size_t>(tokens));
        for (auto& v : pos) v = testing::randomInt(rng, 0, 3000);
        std::vector<float> x = testing::randomFloats(rng, size_t(tokens * heads * head_dim));
        std::vector<double> expected(x.begin(), x.end());
        Status s = applyRope(x.data(), tokens, heads, head_dim, pos.data(), p);
        ASSERT_TRUE(s.ok()) << s.error().message;
        referenceRope(expected, tokens, heads, head_dim, pos, p);
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t e = 0; e < heads * head_dim; ++e) {
            const size_t at = size_t(t * heads * head_dim + e);
            // The kernel forms angles in f32 as transformers does: an angle of
            // ~pos radians carries ~pos * 2^-24 of rounding.
            const double tol = 4e-6 + 4.0 * pos[size_t(t)] * 6e-8;
            ASSERT_NEAR(x[at], expected[at], tol) << "pos " << pos[size_t(t)] << " elem " << e;
          }
      }
    }
  }
}

// Interleaved (GGUF) rope rounds as ggml's: theta_scale = powf(base,
// -2/n_dims), angles by repeated f32 multiplication from the position,
// cosf/sinf, each output one FMA onto the other product.
TEST(RopeTest, InterleavedRoundsAsGgmlBitForBit) {
  std::mt19937 rng(51);
  RopeParams p;
  p.style = RopeStyle::kInterleaved;
  p.theta = 100000.0f;
  const int heads = 3, head_dim = 64;
  const std::vector<int32_t> pos = {0, 1, 37, 500, 4095};
  std::vector<float> x = testing::randomFloats(rng, pos.size() * heads * head_dim, -3.0f, 3.0f);
  const std::vector<float> before = x;
  ASSERT_TRUE(applyRope(x.data(), int64_t(pos.size()), heads, head_dim, pos.data(), p).ok());
  const float theta_scale = powf(100000.0f, -2.0f / 64);
  for (size_t t = 0; t < pos.size(); ++t) {
    float theta = float(pos[t]);
    for (int i = 0; i < head_dim / 2; ++i, theta *= theta_scale) {
      const float c = cosf(theta), s = sinf(theta);
      for (int h = 0; h < heads; ++h) {
        const size_t at = (t * heads + size_t(h)) * head_dim + 2 * size_t(i);
        const float a = before[at], b = before[at + 1];
        ASSERT_EQ(x[at], std::fma(a, c, -(b * s))) << "pos " << pos[t] << " pair " << i;
        ASSERT_EQ(x[at + 1], std::fma(a, s, b * c)) << "pos " << pos[t] << " pair " << i;
      }
    }
  }
}

TEST(RopeTest, PositionZeroIsIdentity) {
  std::vector<float> x = {1, 2, 3, 4};
  const std::vector<float> before = x;
  const int32_t pos = 0;
  ASSERT_TRUE(applyRope(x.data(), 1, 1, 4, &pos, RopeParams{}).ok());
  EXPECT_EQ(x, before);
}

TEST(RopeTest, RejectsBadParams) {
  std::vector<float> x(8);
  const int32_t pos[2] = {0, -3};
  RopeParams p;
  EXPECT_FALSE(applyRope(x.data(), 1, 1, 3, pos, p).ok());  // odd head_dim
  Status s = applyRope(x.data(), 2, 1, 4, pos, p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("position -3"), std::string::npos) << s.error().message;
  p.scaling = RopeScaling::kLlama3;
  p.low_freq_factor = 4.0f;
  p.high_freq_factor = 1.0f;
  EXPECT_FALSE(ropeInvFreq(p, 8).ok());
}

}  // namespace
}  // namespace kiln::cpu
