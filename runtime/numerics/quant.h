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
// dst: [n] f32
// n must be a multiple of kQuantBlock for quantized types.
Status dequantizeRow(WeightType type, const void* src, float* dst, int64_t n);

// src: [n] f32 -> dst: rowBytes(type, n) bytes, bit-identical to gguf-py's
// numpy quantizers (which ggml's C reference quantizers also match).
Status quantizeRow(WeightType type, const float* src, void* dst, int64_t n);

}  // namespace kiln
