// Conversions between f32 and the weight formats of weight_type.h: scalar
// half-precision conversions, row dequantization (used by the CPU kernels for
// embeddings and for the f32 tiles fed to sgemm), and ggml-compatible row
// quantization (used by tests and for load-time weight preparation: the weight
// store's, and the CUDA executor's rows in the form its GEMMs read).
#pragma once

#include <cstdint>

#include "runtime/numerics/weight_type.h"
#include "runtime/support/error.h"

namespace kiln {

// IEEE binary16 <-> f32. toF16 rounds to nearest even, like numpy's astype.
float f16ToF32(uint16_t bits);
// The [65536] lookup table behind f16ToF32, for inner loops.
const float* f16ToF32Table();
uint16_t f32ToF16(float value);
// bfloat16 <-> f32. toBf16 rounds to nearest even; NaN stays NaN.
inline float bf16ToF32(uint16_t bits) {
  uint32_t u = uint32_t(bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
uint16_t f32ToBf16(float value);

// src: one row of n elements stored as `type` (rowBytes(type, n) bytes)
// dst: [n] f32, bit-identical to gguf-py's numpy dequantizers.
// n must be a multiple of quantBlockElements(type).
Status dequantizeRow(WeightType type, const void* src, float* dst, int64_t n);

// src: [n] f32 -> dst: rowBytes(type, n) bytes, bit-identical to gguf-py's
// numpy quantizers (which ggml's C reference quantizers also match). The
// K-quants have none (an error): they are read from GGUF files, never made.
Status quantizeRow(WeightType type, const float* src, void* dst, int64_t n);

// Sub-block j (0..7) of a q4_k/q5_k super-block: its 6-bit scale and min,
// unpacked from the 12 packed bytes (layout in weight_type.h).
struct KQuantScale {
  uint8_t scale;
  uint8_t min;
};
inline KQuantScale kQuantScale(const uint8_t* scales, int j) {
  if (j < 4) return {uint8_t(scales[j] & 63), uint8_t(scales[j + 4] & 63)};
  return {uint8_t((scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4)),
          uint8_t((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))};
}

// The unsigned 6-bit quant (0..63) of element e (0..255) of a q6_k block.
inline int q6kQuant(const BlockQ6_K& blk, int e) {
  const int h = e / 128, k = (e % 128) / 32, l = e % 32;
  const uint8_t low = blk.ql[64 * h + 32 * (k & 1) + l];
  const int low4 = k < 2 ? low & 0x0f : low >> 4;
  const int high2 = (blk.qh[32 * h + l] >> (2 * k)) & 3;
  return low4 | (high2 << 4);
}

}  // namespace kiln
