// KV pools of int8 and fp8 e4m3 codes: each (token slot, kv head) row of
// head_dim codes has one f32 scale, chosen when the row is appended, in
// scales [num_blocks, Hkv, page_size] f32 beside the pool (a page's scales of
// one head are contiguous: four keys' scales are one 16-byte load):
//   scale = absmax(row) / qmax        qmax 127 (int8), 448 (e4m3's largest finite)
//   code  = round(x / scale)          nearest, ties to even; int8 within ±127,
//                                     e4m3fn saturated to ±448; scale 0: code 0
//   value = code * scale
// The same rules as the CPU backend's (runtime/kv/kv_quant.h), in the same
// f32 operations, so both backends append the same bytes.
//
// The codes' element types KvInt8 and KvE4M3 stand in for a Config's Kv
// where a kernel takes bf16 or f32 pools: KvScaled<Kv> tells them apart,
// kv_load8 / kv_load1 read codes (unscaled) or float values alike.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common.cuh"
#endif

namespace kiln {
namespace kernels {

struct KvInt8 {
  signed char bits;
};
struct KvE4M3 {
  unsigned char bits;
};

// Staged: what a kernel writes a row as before it reaches the pool (the
// pool's own type, or f32 for the scaled codes, quantized a row at a time).
template <class Kv>
struct KvScaled {
  static constexpr bool value = false;
  using Staged = Kv;
};
template <>
struct KvScaled<KvInt8> {
  static constexpr bool value = true, kInt8 = true;
  static constexpr float kMax = 127.0f;
  using Staged = float;
};
template <>
struct KvScaled<KvE4M3> {
  static constexpr bool value = true, kInt8 = false;
  static constexpr float kMax = 448.0f;
  using Staged = float;
};

// The device functions; they also compile on the host under
// KILN_CUDA_EMULATION (test/gpu/cuda_emulation.h supplies the intrinsics).
#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(KILN_CUDA_EMULATION)

// Where the scale of (slot, kv_head) is: [num_blocks, Hkv, page_size].
template <int kPageSize, int kKvHeads>
__device__ __forceinline__ long long kv_scale_index(long long slot, int kv_head) {
  return (slot / kPageSize * kKvHeads + kv_head) * kPageSize + slot % kPageSize;
}

// An e4m3fn code as f32: its 7 magnitude bits moved to the top of an f32's
// exponent and mantissa make 2^-120 times the value (subnormal codes land on
// f32 subnormals, so no branch), exact after the scaling by 2^120.
__device__ __forceinline__ float e4m3_to_float(unsigned code) {
  return __uint_as_float(((code & 0x80u) << 24) | ((code & 0x7fu) << 20)) * 0x1p120f;
}

__device__ __forceinline__ float kv_code_to_float(KvInt8 c) { return (float)c.bits; }
__device__ __forceinline__ float kv_code_to_float(KvE4M3 c) { return e4m3_to_float(c.bits); }

// The nearest e4m3fn code to a finite x (ties to even), saturated to ±448.
__device__ __forceinline__ unsigned char float_to_e4m3(float x) {
  const unsigned char sign = x < 0.0f ? 0x80 : 0;  // -0 encodes as +0
  const float a = fabsf(x);
  if (a >= 448.0f) return sign | 0x7e;
  // Below 2^-6 the spacing is 2^-9 (subnormals): the code is the multiple,
  // and rounding up to 8 lands on the smallest normal, code 8.
  if (a < 0x1p-6f) return sign | (unsigned char)rintf(a * 0x1p9f);
  int exponent;
  (void)frexpf(a, &exponent);  // a = f * 2^exponent, f in [0.5, 1)
  exponent -= 1;
  int steps = (int)rintf(ldexpf(a, 3 - exponent));  // in [8, 16]
  if (steps == 16) {
    steps = 8;
    ++exponent;
  }
  return sign | (unsigned char)(((exponent + 7) << 3) | (steps - 8));
}

// x / scale as a code of Kv (scale > 0).
template <class Kv>
__device__ __forceinline__ Kv kv_encode(float x, float scale) {
  const float q = x / scale;
  if constexpr (KvScaled<Kv>::kInt8) {
    return Kv{(signed char)fminf(fmaxf(rintf(q), -127.0f), 127.0f)};
  } else {
    return Kv{float_to_e4m3(q)};
  }
}

// Eight consecutive elements of a pool row (8-byte aligned for codes):
// float pools' values, scaled pools' codes as f32 (the row's scale is
// applied by the caller).
template <class Kv>
__device__ __forceinline__ void kv_load8(const Kv* p, float (&out)[8]) {
  if constexpr (KvScaled<Kv>::value) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = kv_code_to_float(Kv{(decltype(Kv::bits))((i < 4 ? raw.x : raw.y) >> (8 * (i % 4)))});
  } else {
    load8(p, out);
  }
}
template <class Kv>
__device__ __forceinline__ float kv_load1(const Kv* p) {
  if constexpr (KvScaled<Kv>::value) return kv_code_to_float(*p);
  else return to_float(*p);
}

// The sixteen codes of a 16-byte chunk of a scaled pool row as f32.
template <class Kv>
__device__ __forceinline__ void kv_unpack16(const uint4& raw, float* out) {
  const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 16; ++i) out[i] = kv_code_to_float(Kv{(decltype(Kv::bits))(w[i / 4] >> (8 * (i % 4)))});
}

// One row of D f32 values (shared memory) quantized by one warp: its codes
// to `codes` [D] and its scale to *scale. Every lane of the warp calls it.
template <class Kv, int D>
__device__ __forceinline__ void kv_quantize_row_warp(const float* row, Kv* codes, float* scale, int lane) {
  float absmax = 0.0f;
  for (int e = lane; e < D; e += 32) absmax = fmaxf(absmax, fabsf(row[e]));
#pragma unroll
  for (int o = 16; o > 0; o /= 2) absmax = fmaxf(absmax, __shfl_xor_sync(0xffffffffu, absmax, o));
  const float s = absmax / KvScaled<Kv>::kMax;
  for (int e = lane; e < D; e += 32) codes[e] = s == 0.0f ? Kv{0} : kv_encode<Kv>(row[e], s);
  if (lane == 0) *scale = s;
}

#endif  // device functions

}  // namespace kernels
}  // namespace kiln
