#include "runtime/kv/kv_quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace kiln {
namespace {

// e4m3fn from its fields, written from the format's description: sign,
// 4 exponent bits (bias 7), 3 mantissa bits, subnormals below 2^-6, the one
// NaN per sign at S.1111.111 and no infinities.
double naiveE4M3(uint8_t code) {
  const int exponent = (code >> 3) & 0xf, mantissa = code & 7;
  double magnitude = exponent == 0 ? std::ldexp(mantissa / 8.0, -6) : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  if (exponent == 0xf && mantissa == 7) magnitude = NAN;
  return (code & 0x80) ? -magnitude : magnitude;
}

TEST(KvQuantTest, E4M3DecodesEveryCode) {
  for (int code = 0; code < 256; ++code) {
    const double expected = naiveE4M3(uint8_t(code));
    if (std::isnan(expected))
      EXPECT_TRUE(std::isnan(e4m3ToF32(uint8_t(code)))) << code;
    else
      EXPECT_EQ(e4m3ToF32(uint8_t(code)), expected) << code;
  }
  EXPECT_EQ(e4m3ToF32(0x7e), 448.0f);
  EXPECT_EQ(e4m3ToF32(0x01), std::ldexp(1.0f, -9));
}

// Every finite code round-trips, and any float goes to the nearest code
// (ties to the even code), saturating at ±448.
TEST(KvQuantTest, E4M3EncodesToTheNearestCode) {
  for (int code = 0; code < 256; ++code)
    if (!std::isnan(naiveE4M3(uint8_t(code))) && code != 0x80) EXPECT_EQ(f32ToE4M3(e4m3ToF32(uint8_t(code))), code);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-12.0f, 9.5f);
  for (int i = 0; i < 20000; ++i) {
    const float x = (i % 2 ? -1.0f : 1.0f) * std::exp2(exponent(rng));
    const uint8_t got = f32ToE4M3(x);
    const double error = std::fabs(naiveE4M3(got) - x);
    for (int code = 0; code < 256; ++code) {
      const double other = naiveE4M3(uint8_t(code));
      if (std::isnan(other)) continue;
      const double other_error = std::fabs(other - x);
      ASSERT_LE(error, other_error) << x << " -> " << int(got) << ", but " << code << " is nearer";
      if (other_error == error && code != got) {
        ASSERT_EQ(got & 1, 0) << x << ": a tie goes to the even code";
      }
    }
  }
  EXPECT_EQ(f32ToE4M3(1e6f), 0x7e);
  EXPECT_EQ(f32ToE4M3(-1e6f), 0xfe);
  EXPECT_EQ(f32ToE4M3(464.0f), 0x7e);  // halfway to the 480 e4m3fn lacks: saturates
}

// Each decoded value is within half a quantization step of the input: a
// step is the scale for int8, and e4m3's spacing at the value (scaled) for fp8.
TEST(KvQuantTest, RowsDecodeWithinHalfAStep) {
  std::mt19937 rng(11);
  for (KvElement element : {KvElement::kInt8, KvElement::kFp8E4M3}) {
    for (float range : {1e-4f, 1.0f, 3e4f}) {
      std::uniform_real_distribution<float> dist(-range, range);
      std::vector<float> x(80);
      for (float& v : x) v = dist(rng);
      std::vector<uint8_t> codes(x.size());
      std::vector<float> back(x.size());
      const float scale = quantizeKvRow(x.data(), int64_t(x.size()), element, codes.data());
      double absmax = 0;
      for (float v : x) absmax = std::max(absmax, std::fabs(double(v)));
      EXPECT_NEAR(scale, absmax / kvQuantMax(element), 1e-6 * scale);
      dequantizeKvRow(codes.data(), scale, int64_t(x.size()), element, back.data());
      for (size_t i = 0; i < x.size(); ++i) {
        const double q = std::fabs(x[i]) / scale;
        // e4m3 spacing at q: 2^(floor(log2 q) - 3), 2^-9 below 2^-6.
        const double step = element == KvElement::kInt8 ? 1.0 : std::ldexp(1.0, std::max(int(std::floor(std::log2(q))), -6) - 3);
        ASSERT_LE(std::fabs(back[i] - x[i]), (0.5 * step + 1e-5) * scale) << kvElementName(element) << " " << x[i];
      }
    }
  }
}

TEST(KvQuantTest, ZeroRowDecodesToZeros) {
  for (KvElement element : {KvElement::kInt8, KvElement::kFp8E4M3}) {
    std::vector<float> x(16, 0.0f), back(16, 1.0f);
    std::vector<uint8_t> codes(16, 0xaa);
    EXPECT_EQ(quantizeKvRow(x.data(), 16, element, codes.data()), 0.0f);
    dequantizeKvRow(codes.data(), 0.0f, 16, element, back.data());
    for (size_t i = 0; i < 16; ++i) {
      EXPECT_EQ(codes[i], 0);
      EXPECT_EQ(back[i], 0.0f);
    }
  }
}

TEST(KvQuantTest, LargestMagnitudeGetsTheLargestCode) {
  const float x[4] = {0.5f, -2.0f, 1.0f, 0.0f};
  uint8_t codes[4];
  EXPECT_EQ(quantizeKvRow(x, 4, KvElement::kInt8, codes), 2.0f / 127.0f);
  EXPECT_EQ(int8_t(codes[1]), -127);
  EXPECT_EQ(quantizeKvRow(x, 4, KvElement::kFp8E4M3, codes), 2.0f / 448.0f);
  EXPECT_EQ(codes[1], 0xfe);
}

}  // namespace
}  // namespace kiln
