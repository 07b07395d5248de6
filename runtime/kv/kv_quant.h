// Quantized KV rows. An int8 or fp8 e4m3 pool stores each (token slot, kv
// head) row of head_dim values as one byte each plus one f32 scale, chosen
// when the row is appended (there is no calibration data for static scales):
//   scale = absmax(row) / qmax        qmax: 127 (int8), 448 (e4m3's largest finite)
//   code  = round(x / scale)          int8: nearest integer, ties to even, in [-127, 127]
//                                     e4m3: nearest e4m3fn value, ties to even, within ±448
//   value = code * scale
// An all-zero row gets scale 0 and codes 0, so it decodes to zeros. Inputs
// must be finite. The CUDA kernels (codegen/kernels/kv_quant.cuh) use the
// same rules, so a row appended on either backend holds the same bytes.
#pragma once

#include <cstdint>

#include "runtime/kv/block_pool.h"

namespace kiln {

// The largest code magnitude of a scaled element (127 or 448); 0 for the
// float elements.
float kvQuantMax(KvElement element);

// The nearest e4m3fn value to x (ties to even), saturated to ±448; NaN
// stays NaN (0x7f).
uint8_t f32ToE4M3(float x);
float e4m3ToF32(uint8_t code);

// Where the scale of (slot, kv_head) is in a pool's scales,
// [num_blocks, kv_heads, page_size]: a page's scales of one head are
// contiguous, so the GPU's decode attention reads four keys' scales with one
// 16-byte copy.
inline int64_t kvScaleIndex(int64_t slot, int kv_head, int page_size, int kv_heads) {
  return (slot / page_size * kv_heads + kv_head) * page_size + slot % page_size;
}

// Writes `n` codes of `x` for a scaled element (int8 or e4m3) and returns
// the row's scale.
float quantizeKvRow(const float* x, int64_t n, KvElement element, uint8_t* codes);

// `n` values code * scale of a scaled element's row.
void dequantizeKvRow(const uint8_t* codes, float scale, int64_t n, KvElement element, float* out);

}  // namespace kiln
