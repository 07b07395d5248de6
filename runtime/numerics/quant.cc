#include "runtime/numerics/quant.h"

#include <array>
#include <cmath>
#include <cstring>
#include <memory>

namespace kiln {
namespace {

uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float f16ToF32Slow(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in f32.
    float magnitude = std::ldexp(float(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return bitsFloat(sign | 0x7f800000u | (mantissa << 13));
  return bitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// 256 KiB, built once: block scales are read once per 32 elements and f16
// weight tiles once per element, so a load beats the bit fiddling.
const float* f16Table() {
  static const std::unique_ptr<float[]> table = [] {
    auto t = std::make_unique<float[]>(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = f16ToF32Slow(uint16_t(i));
    return t;
  }();
  return table.get();
}

Status checkBlocks(WeightType type, int64_t n) {
  if (n < 0) return makeError("row length {} is invalid: expected >= 0", n);
  if (n % quantBlockElements(type) != 0)
    return makeError("{} row length {} is invalid: expected a multiple of {}",
                     weightTypeName(type), n, quantBlockElements(type));
  return Status::success();
}

void dequantizeQ4_0(const BlockQ4_0* blocks, float* dst, int64_t nb) {
  const float* table = f16Table();
  for (int64_t b = 0; b < nb; ++b) {
    const float d = table[blocks[b].d];
    float* out = dst + b * kQuantBlock;
    for (int j = 0; j < 16; ++j) {
      out[j] = float(int(blocks[b].qs[j] & 0x0f) - 8) * d;
      out[j + 16] = float(int(blocks[b].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantizeQ4_1(const BlockQ4_1* blocks, float* dst, int64_t nb) {
  const float* table = f16Table();
  for (int64_t b = 0; b < nb; ++b) {
    const float d = table[blocks[b].d];
    const float m = table[blocks[b].m];
    float* out = dst + b * kQuantBlock;
    for (int j = 0; j < 16; ++j) {
      out[j] = float(blocks[b].qs[j] & 0x0f) * d + m;
      out[j + 16] = float(blocks[b].qs[j] >> 4) * d + m;
    }
  }
}

void dequantizeQ8_0(const BlockQ8_0* blocks, float* dst, int64_t nb) {
  const float* table = f16Table();
  for (int64_t b = 0; b < nb; ++b) {
    const float d = table[blocks[b].d];
    float* out = dst + b * kQuantBlock;
    for (int j = 0; j < 32; ++j) out[j] = float(blocks[b].qs[j]) * d;
  }
}

// K-quants: each value is (d * scale) * q - (dmin * min), every product
// rounded to f32 on its own, in gguf-py's (and ggml's) order.
// One q4_k or q5_k super-block (qh: q5_k's fifth bits, null for q4_k).
void dequantizeQ45KBlock(uint16_t d_bits, uint16_t dmin_bits, const uint8_t* scales, const uint8_t* qs,
                         const uint8_t* qh, float* out) {
  const float* table = f16Table();
  const float d = table[d_bits], dmin = table[dmin_bits];
  for (int j = 0; j < 8; ++j) {
    const KQuantScale s = kQuantScale(scales, j);
    const float scale = d * float(s.scale), offset = dmin * float(s.min);
    const uint8_t* sub = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      const int q = ((sub[l] >> shift) & 0x0f) | (qh ? ((qh[l] >> j) & 1) << 4 : 0);
      out[32 * j + l] = scale * float(q) - offset;
    }
  }
}

void dequantizeQ4_K(const BlockQ4_K* blocks, float* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b)
    dequantizeQ45KBlock(blocks[b].d, blocks[b].dmin, blocks[b].scales, blocks[b].qs, nullptr, dst + b * kSuperBlock);
}

void dequantizeQ5_K(const BlockQ5_K* blocks, float* dst, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b)
    dequantizeQ45KBlock(blocks[b].d, blocks[b].dmin, blocks[b].scales, blocks[b].qs, blocks[b].qh,
                        dst + b * kSuperBlock);
}

void dequantizeQ6_K(const BlockQ6_K* blocks, float* dst, int64_t nb) {
  const float* table = f16Table();
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ6_K& blk = blocks[b];
    const float d = table[blk.d];
    float* out = dst + b * kSuperBlock;
    for (int e = 0; e < 256; ++e) {
      const int q = q6kQuant(blk, e);
      out[e] = (d * float(blk.scales[e / 16])) * float(q - 32);
    }
  }
}

// The quantizers below follow gguf-py's numpy code operation by operation in
// f32, so the produced bytes are identical.
void quantizeQ4_0(const float* src, BlockQ4_0* blocks, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = src + b * kQuantBlock;
    float max = 0.0f, amax = -1.0f;
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(x[j]) > amax) {  // first index of the largest magnitude
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    uint8_t q[32];
    for (int j = 0; j < 32; ++j) {
      int v = int(std::trunc(x[j] * id + 8.5f));
      q[j] = uint8_t(v < 0 ? 0 : v > 15 ? 15 : v);
    }
    blocks[b].d = f32ToF16(d);
    for (int j = 0; j < 16; ++j) blocks[b].qs[j] = uint8_t(q[j] | (q[j + 16] << 4));
  }
}

void quantizeQ4_1(const float* src, BlockQ4_1* blocks, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = src + b * kQuantBlock;
    float max = x[0], min = x[0];
    for (int j = 1; j < 32; ++j) {
      max = std::max(max, x[j]);
      min = std::min(min, x[j]);
    }
    const float d = (max - min) / 15.0f;
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    uint8_t q[32];
    for (int j = 0; j < 32; ++j) {
      int v = int(std::trunc((x[j] - min) * id + 0.5f));
      q[j] = uint8_t(v < 0 ? 0 : v > 15 ? 15 : v);
    }
    blocks[b].d = f32ToF16(d);
    blocks[b].m = f32ToF16(min);
    for (int j = 0; j < 16; ++j) blocks[b].qs[j] = uint8_t(q[j] | (q[j + 16] << 4));
  }
}

void quantizeQ8_0(const float* src, BlockQ8_0* blocks, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = src + b * kQuantBlock;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    for (int j = 0; j < 32; ++j) blocks[b].qs[j] = int8_t(std::round(x[j] * id));
    blocks[b].d = f32ToF16(d);
  }
}

}  // namespace

float f16ToF32(uint16_t bits) { return f16Table()[bits]; }
const float* f16ToF32Table() { return f16Table(); }

uint16_t f32ToF16(float value) {
  const uint32_t x = floatBits(value);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00;      // NaN
  if (magnitude >= 0x47800000u) return sign | 0x7c00;     // overflow -> inf
  if (magnitude >= 0x38800000u) {                         // normal half
    // Round to nearest even on the 13 dropped bits; a carry bumps the
    // exponent, which is the right answer (up to inf at 65520).
    uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
    return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
  }
  // Subnormal half: adding 0.5f makes the FPU round to a multiple of 2^-24
  // (round to nearest even), which leaves the half mantissa in the low bits.
  const float shifted = std::fabs(value) + 0.5f;
  return uint16_t(sign | (floatBits(shifted) - 0x3f000000u));
}

uint16_t f32ToBf16(float value) {
  const uint32_t x = floatBits(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);
  return uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

Status dequantizeRow(WeightType type, const void* src, float* dst, int64_t n) {
  KILN_RETURN_IF_ERROR(checkBlocks(type, n));
  const int64_t nb = n / kQuantBlock;
  switch (type) {
    case WeightType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      break;
    case WeightType::F16: {
      const float* table = f16Table();
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = table[h[i]];
      break;
    }
    case WeightType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16ToF32(h[i]);
      break;
    }
    case WeightType::Q4_0: dequantizeQ4_0(static_cast<const BlockQ4_0*>(src), dst, nb); break;
    case WeightType::Q4_1: dequantizeQ4_1(static_cast<const BlockQ4_1*>(src), dst, nb); break;
    case WeightType::Q8_0: dequantizeQ8_0(static_cast<const BlockQ8_0*>(src), dst, nb); break;
    case WeightType::Q4_K:
      dequantizeQ4_K(static_cast<const BlockQ4_K*>(src), dst, n / kSuperBlock);
      break;
    case WeightType::Q5_K:
      dequantizeQ5_K(static_cast<const BlockQ5_K*>(src), dst, n / kSuperBlock);
      break;
    case WeightType::Q6_K:
      dequantizeQ6_K(static_cast<const BlockQ6_K*>(src), dst, n / kSuperBlock);
      break;
  }
  return Status::success();
}

Status quantizeRow(WeightType type, const float* src, void* dst, int64_t n) {
  KILN_RETURN_IF_ERROR(checkBlocks(type, n));
  const int64_t nb = n / kQuantBlock;
  switch (type) {
    case WeightType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      break;
    case WeightType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32ToF16(src[i]);
      break;
    }
    case WeightType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32ToBf16(src[i]);
      break;
    }
    case WeightType::Q4_0: quantizeQ4_0(src, static_cast<BlockQ4_0*>(dst), nb); break;
    case WeightType::Q4_1: quantizeQ4_1(src, static_cast<BlockQ4_1*>(dst), nb); break;
    case WeightType::Q8_0: quantizeQ8_0(src, static_cast<BlockQ8_0*>(dst), nb); break;
    case WeightType::Q4_K:
    case WeightType::Q5_K:
    case WeightType::Q6_K:
      return makeError("{} has no quantizer in kiln: K-quant weights arrive quantized in GGUF "
                       "files",
                       weightTypeName(type));
  }
  return Status::success();
}

}  // namespace kiln
