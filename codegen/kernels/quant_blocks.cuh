// Block-quantized GEMM weights as the CUDA kernels read them: ggml's
// 32-element blocks (q4_0, q4_1, q8_0), repacked once at load
// (runtime/numerics/packed_blocks.h) into planes a warp reads coalesced,
// the bits per weight unchanged:
//
//   quants [N][K] 4-bit (element e of a row in byte e / 2, the low nibble
//          for even e) or [N][K] i8, at byte 0;
//   scales [N][K / 32] f16 (the blocks' d), after the quants;
//   mins   [N][K / 32] f16 (q4_1's m), after the scales.
//
// An element is d·(q - 8) (q4_0), d·q + m (q4_1) or d·q (q8_0), exactly
// the CPU's dequantization. Eight consecutive elements are 4 (or 8)
// consecutive bytes of quants and one scale, so the skinny GEMM keeps its
// 8-element vectors (gemv.cuh: load8_weight).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common.cuh"
#endif

namespace kiln {
namespace kernels {

// The packed weight types a Config names as its Weight.
struct PackedQ4_0 { static constexpr int kBits = 4; static constexpr bool kMin = false; static constexpr int kOffset = 8; };
struct PackedQ4_1 { static constexpr int kBits = 4; static constexpr bool kMin = true; static constexpr int kOffset = 0; };
struct PackedQ8_0 { static constexpr int kBits = 8; static constexpr bool kMin = false; static constexpr int kOffset = 0; };

template <class W> struct IsPacked { static constexpr bool value = false; };
template <> struct IsPacked<PackedQ4_0> { static constexpr bool value = true; };
template <> struct IsPacked<PackedQ4_1> { static constexpr bool value = true; };
template <> struct IsPacked<PackedQ8_0> { static constexpr bool value = true; };

// The planes of an [n, k] matrix of W, in bytes from its start.
template <class W>
struct PackedPlanes {
  static constexpr long long quant_bytes(long long n, long long k) { return n * k * W::kBits / 8; }
  static constexpr long long scales_at(long long n, long long k) { return quant_bytes(n, k); }
  static constexpr long long mins_at(long long n, long long k) { return quant_bytes(n, k) + n * (k / 32) * 2; }
  static constexpr long long bytes(long long n, long long k) { return mins_at(n, k) + (W::kMin ? n * (k / 32) * 2 : 0); }
};

// Elements v·8 .. v·8 + 7 of row `row` of the [kN, kK] packed matrix at `w`
// as f32, the quants loaded under L2 `policy`.
template <class W, int kN, int kK>
__device__ __forceinline__ void load8_packed(const void* w, long long row, int v, float (&out)[8],
                                             unsigned long long policy) {
  static_assert(kK % 32 == 0, "whole blocks a row");
  using Planes = PackedPlanes<W>;
  const unsigned char* base = static_cast<const unsigned char*>(w);
  const long long e = row * kK + (long long)v * 8;  // the first element
  const long long block = e / 32;
  const float d = load_f16_nc(base + Planes::scales_at(kN, kK) + block * 2);
  const float m = W::kMin ? load_f16_nc(base + Planes::mins_at(kN, kK) + block * 2) : 0.0f;
  if constexpr (W::kBits == 4) {
    const unsigned q = load_u32_stream(base + e / 2, policy);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = d * (float)((int)((q >> (4 * i)) & 15u) - W::kOffset) + m;
  } else {
    unsigned lo, hi;
    load_u32x2_stream(base + e, lo, hi, policy);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[i] = d * (float)(signed char)((lo >> (8 * i)) & 255u);
      out[4 + i] = d * (float)(signed char)((hi >> (8 * i)) & 255u);
    }
  }
}

}  // namespace kernels
}  // namespace kiln
