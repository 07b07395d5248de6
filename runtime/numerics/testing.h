// Test-only helpers shared by the numerics and CPU kernel tests: random data, NaN poisoning to
// catch unwritten outputs, and naive float64 decoders of the ggml block
// formats written straight from the format description (independent of
// quant.cc).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/numerics/weight_type.h"

namespace kiln::testing {

inline std::vector<float> randomFloats(std::mt19937& rng, size_t n, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<float> poisoned(size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

inline int randomInt(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// IEEE half from its fields, in double.
inline double naiveF16(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double magnitude;
  if (exponent == 0)
    magnitude = std::ldexp(double(mantissa), -24);
  else if (exponent == 31)
    magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN()
                         : std::numeric_limits<double>::infinity();
  else
    magnitude = std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
  return sign ? -magnitude : magnitude;
}

inline double naiveBf16(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t readU16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

// Element i of a row stored as `type`, read from the raw bytes.
inline double naiveElement(WeightType type, const uint8_t* row, int64_t i) {
  switch (type) {
    case WeightType::F32: {
      float f;
      std::memcpy(&f, row + 4 * i, 4);
      return f;
    }
    case WeightType::F16: return naiveF16(readU16(row + 2 * i));
    case WeightType::BF16: return naiveBf16(readU16(row + 2 * i));
    case WeightType::Q8_0: {
      const uint8_t* block = row + (i / 32) * 34;
      return double(int8_t(block[2 + i % 32])) * naiveF16(readU16(block));
    }
    case WeightType::Q4_0: {
      const uint8_t* block = row + (i / 32) * 18;
      const int j = int(i % 32);
      const int q = j < 16 ? (block[2 + j] & 0x0f) : (block[2 + j - 16] >> 4);
      return double(q - 8) * naiveF16(readU16(block));
    }
    case WeightType::Q4_1: {
      const uint8_t* block = row + (i / 32) * 20;
      const int j = int(i % 32);
      const int q = j < 16 ? (block[4 + j] & 0x0f) : (block[4 + j - 16] >> 4);
      return double(q) * naiveF16(readU16(block)) + naiveF16(readU16(block + 2));
    }
  }
  return 0.0;
}

inline constexpr WeightType kAllWeightTypes[] = {WeightType::F32,  WeightType::F16,
                                                 WeightType::BF16, WeightType::Q4_0,
                                                 WeightType::Q4_1, WeightType::Q8_0};

}  // namespace kiln::testing
