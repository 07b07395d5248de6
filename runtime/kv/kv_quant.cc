#include "runtime/kv/kv_quant.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace kiln {

namespace {

constexpr float kInt8Max = 127.0f;
constexpr float kE4M3Max = 448.0f;

// All 256 e4m3fn codes as f32: attention decodes a row per key, so a table
// lookup beats unpacking the fields.
const std::array<float, 256>& e4m3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int code = 0; code < 256; ++code) {
      const int exponent = (code >> 3) & 0xf, mantissa = code & 7;
      float magnitude;
      if (exponent == 0xf && mantissa == 7)
        magnitude = NAN;
      else if (exponent == 0)
        magnitude = std::ldexp(float(mantissa), -9);  // subnormal: m/8 * 2^-6
      else
        magnitude = std::ldexp(1.0f + float(mantissa) / 8.0f, exponent - 7);
      t[size_t(code)] = (code & 0x80) ? -magnitude : magnitude;
    }
    return t;
  }();
  return table;
}

}  // namespace

float kvQuantMax(KvElement element) {
  switch (element) {
    case KvElement::kInt8: return kInt8Max;
    case KvElement::kFp8E4M3: return kE4M3Max;
    default: return 0.0f;
  }
}

uint8_t f32ToE4M3(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = x < 0.0f ? 0x80 : 0;  // -0 encodes as +0, as on the GPU
  const float a = std::fabs(x);
  if (a >= kE4M3Max) return sign | 0x7e;
  // Below 2^-6 the spacing is 2^-9 (subnormals): the code is the multiple
  // itself, and rounding up to 8 lands on the smallest normal, code 8.
  if (a < 0x1p-6f) return sign | uint8_t(std::nearbyint(a * 0x1p9f));
  int exponent;
  (void)std::frexp(a, &exponent);  // a = f * 2^exponent, f in [0.5, 1)
  exponent -= 1;                   // a in [2^exponent, 2^(exponent+1))
  int steps = int(std::nearbyint(std::ldexp(a, 3 - exponent)));  // in [8, 16]
  if (steps == 16) {
    steps = 8;
    ++exponent;
  }
  return sign | uint8_t(((exponent + 7) << 3) | (steps - 8));
}

float e4m3ToF32(uint8_t code) { return e4m3Table()[code]; }

float quantizeKvRow(const float* x, int64_t n, KvElement element, uint8_t* codes) {
  float absmax = 0.0f;
  for (int64_t i = 0; i < n; ++i) absmax = std::max(absmax, std::fabs(x[i]));
  const float scale = absmax / kvQuantMax(element);
  if (scale == 0.0f) {
    std::fill(codes, codes + n, uint8_t(0));
    return 0.0f;
  }
  if (element == KvElement::kInt8) {
    for (int64_t i = 0; i < n; ++i) {
      const float q = std::clamp(std::nearbyint(x[i] / scale), -kInt8Max, kInt8Max);
      codes[i] = uint8_t(int8_t(q));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) codes[i] = f32ToE4M3(x[i] / scale);
  }
  return scale;
}

void dequantizeKvRow(const uint8_t* codes, float scale, int64_t n, KvElement element, float* out) {
  if (element == KvElement::kInt8) {
    for (int64_t i = 0; i < n; ++i) out[i] = float(int8_t(codes[i])) * scale;
  } else {
    const std::array<float, 256>& table = e4m3Table();
    for (int64_t i = 0; i < n; ++i) out[i] = table[codes[i]] * scale;
  }
}

}  // namespace kiln
