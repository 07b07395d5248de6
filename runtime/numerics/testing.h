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
    case WeightType::Q4_K:
    case WeightType::Q5_K: {
      const bool five = type == WeightType::Q5_K;
      const uint8_t* block = row + (i / 256) * (five ? 176 : 144);
      const int j = int(i % 256), sub = j / 32, l = j % 32;
      const uint8_t* scales = block + 4;
      const uint8_t* qh = block + 16;
      const uint8_t* qs = block + (five ? 48 : 16);
      // 6-bit scale and min of sub-block `sub`: the low 4 sub-blocks keep
      // theirs in bytes 0-7, the high 4 split theirs over bytes 8-11 (low
      // bits) and the top two bits of bytes 0-7.
      int scale, min;
      if (sub < 4) {
        scale = scales[sub] & 63;
        min = scales[sub + 4] & 63;
      } else {
        scale = (scales[sub + 4] & 15) + 16 * (scales[sub - 4] >> 6);
        min = (scales[sub + 4] >> 4) + 16 * (scales[sub] >> 6);
      }
      int q = sub % 2 == 0 ? qs[32 * (sub / 2) + l] % 16 : qs[32 * (sub / 2) + l] / 16;
      if (five) q += 16 * ((qh[l] >> sub) & 1);
      return naiveF16(readU16(block)) * scale * q - naiveF16(readU16(block + 2)) * min;
    }
    case WeightType::Q6_K: {
      const uint8_t* block = row + (i / 256) * 210;
      const int j = int(i % 256), half = j / 128, k = (j % 128) / 32, l = j % 32;
      const uint8_t low = block[64 * half + 32 * (k % 2) + l];
      const int q = (k < 2 ? low % 16 : low / 16) + 16 * ((block[128 + 32 * half + l] >> (2 * k)) % 4);
      return naiveF16(readU16(block + 208)) * double(int8_t(block[192 + j / 16])) * (q - 32);
    }
  }
  return 0.0;
}

inline constexpr WeightType kAllWeightTypes[] = {WeightType::F32,  WeightType::F16,
                                                 WeightType::BF16, WeightType::Q4_0,
                                                 WeightType::Q4_1, WeightType::Q8_0};
// No quantizer makes these (quantizeRow refuses): tests fill them with
// randomBlocks.
inline constexpr WeightType kKQuantTypes[] = {WeightType::Q4_K, WeightType::Q5_K,
                                              WeightType::Q6_K};

// Random bytes of `rows` rows of k elements of `type` (32- or 256-element
// blocks) whose f16 block scales are finite and below 1 in magnitude.
inline std::vector<uint8_t> randomBlocks(std::mt19937& rng, WeightType type, int64_t rows,
                                         int64_t k) {
  const int64_t elements = quantBlockElements(type);
  const int64_t block_bytes = rowBytes(type, elements);
  std::vector<uint8_t> bytes(size_t(rowBytes(type, k) * rows));
  for (auto& b : bytes) b = uint8_t(rng());
  // Offsets of the high bytes of the f16 scales in a block.
  std::vector<int64_t> scale_high_bytes;
  switch (type) {
    case WeightType::Q4_1:
    case WeightType::Q4_K:
    case WeightType::Q5_K: scale_high_bytes = {1, 3}; break;
    case WeightType::Q6_K: scale_high_bytes = {209}; break;
    default: scale_high_bytes = {1}; break;
  }
  for (size_t blk = 0; blk < bytes.size() / size_t(block_bytes); ++blk)
    for (int64_t at : scale_high_bytes) bytes[blk * size_t(block_bytes) + size_t(at)] &= 0xbb;
  return bytes;
}

}  // namespace kiln::testing
