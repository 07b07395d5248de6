// Prefill GEMM of a 2:4 structured-sparse weight on Hopper's sparse
// warpgroup multiply (wgmma.mma_async.sp m64n128k32 bf16, f32 accumulate;
// sm_90a): the same y [rows, n] = x [rows, k] · Wᵀ (+ bias) and the same
// inputs as sparse24_mma.cuh (kept values bf16 [n, k/2], metadata in mma
// order), with both operands read by the tensor cores from shared memory.
//
//   x [rows, k] bf16, values [n, k/2] bf16, metadata [ceil(n/16), k/64, 32] u32,
//   bias [n] bf16, y [rows, n] Config::Y (bf16 or f32)
//
// Entry: kiln::kernels::sparse24_gemm_wgmma<Config>(const Sparse24Params&),
// the instance kind `sparse24_gemm_wgmma` (compiled for sm_90a).
// Config: using Y; static constexpr int kN, kK, kStages, kSmemBytes; bool kBias.
// Grid [ceil(n / 128), ceil(rows / 128)], block [256], kSmemBytes dynamic.
//
// A block's tile is 128 weight rows (warpgroup w takes rows 64 w ..) by
// 128 x rows, 128 input columns a stage: the kept values [128][64] bf16 and
// x [128][128] bf16 as 128-byte-swizzled K-major panels (wgmma.cuh's
// layout), filled by cp.async, kStages stages in flight. Each 32-column
// step is one wgmma per warpgroup: A's descriptor moves 32 bytes (16 kept
// values), B's 64 (32 columns), and each warp gives its 16 rows' metadata
// word, the one sparse24_mma.cuh's lanes give (selector 0, then 1, for the
// two steps of a 64-column pair).
#pragma once

#include "wgmma.cuh"  // descriptors, fences; on the device common.cuh
#include "sparse24_params.cuh"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace kiln {
namespace kernels {
namespace wgmma {

// d += A · B for m64n128k32 with A 2:4 sparse: A's kept values and B from
// shared memory (K-major both), `e` this lane's metadata word.
template <int kSelector>
__device__ __forceinline__ void wgmma_sp_m64n128k32(float (&d)[64], unsigned long long a_desc,
                                                    unsigned long long b_desc, unsigned e) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sp.sync.aligned.m64n128k32.f32.bf16.bf16 "
      KILN_WGMMA_REGISTERS_64 ", "
      "%64, %65, %66, %67, p, 1, 1, 0, 0;\n}\n"
      : KILN_WGMMA_ACCUMULATORS_64(d)
      : "l"(a_desc), "l"(b_desc), "r"(e), "n"(kSelector));
}

}  // namespace wgmma

template <class Config>
__device__ __forceinline__ void sparse24_gemm_wgmma(const Sparse24Params& p) {
  using Y = typename Config::Y;
  constexpr int kN = Config::kN, kK = Config::kK, kStages = Config::kStages, kThreads = 256;
  constexpr int kBlockN = 128, kBlockM = 128, kKTiles = kK / 128;
  constexpr int kMetaTiles = (kN + 15) / 16;
  constexpr int kValueBytes = kBlockN * 128;         // [128 rows][64 kept] bf16
  constexpr int kXBytes = kBlockM * 256;             // [128 rows][128 columns] bf16, two panels
  constexpr int kMetaBytes = kBlockN / 16 * 2 * 128; // 8 tiles by 2 pairs of 32 words
  constexpr int kStageBytes = kValueBytes + kXBytes + kMetaBytes;
  static_assert(kK % 128 == 0, "whole 128-column stages");
  static_assert(kStageBytes % 1024 == 0, "panels on 1024-byte boundaries");
  static_assert(Config::kSmemBytes == kStages * kStageBytes + 1024, "the instance's dynamic shared memory");
  extern __shared__ unsigned char smem_raw[];
  // The swizzle pattern repeats every 1024 bytes: panels start on such a boundary.
  unsigned char* smem = smem_raw + ((1024 - (smem_address(smem_raw) & 1023)) & 1023);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int group = warp / 4, warp_in_group = warp % 4;
  const int n0 = blockIdx.x * kBlockN, m0 = blockIdx.y * kBlockM;
  const unsigned char* values = static_cast<const unsigned char*>(p.values);
  const unsigned char* meta = reinterpret_cast<const unsigned char*>(p.metadata);
  const unsigned char* x = static_cast<const unsigned char*>(p.x);
  const unsigned base = smem_address(smem);

  auto load_stage = [&](int stage, int kt) {
    const unsigned at = base + stage * kStageBytes;
    for (int i = tid; i < kBlockN * 8; i += kThreads) {
      const int row = i / 8, chunk = i % 8, n = n0 + row;
      const unsigned char* src = values + (long long)(n < kN ? n : 0) * kK + kt * 128 + chunk * 16;
      cp_async_16(at + wgmma::tile_offset(row, chunk, kBlockN), src, n < kN ? 16 : 0);
    }
    for (int i = tid; i < kBlockM * 16; i += kThreads) {
      const int row = i / 16, chunk = i % 16, m = m0 + row;
      const unsigned char* src = x + ((long long)(m < p.rows ? m : 0) * kK + kt * 128) * 2 + chunk * 16;
      cp_async_16(at + kValueBytes + wgmma::tile_offset(row, chunk, kBlockM), src, m < p.rows ? 16 : 0);
    }
    for (int i = tid; i < kMetaBytes / 16; i += kThreads) {  // tile t's pairs 2 kt, 2 kt + 1: 256 bytes
      const int t = i / 16, tile = n0 / 16 + t, chunk = i % 16;
      const unsigned char* src = meta + ((long long)(tile < kMetaTiles ? tile : 0) * (kK / 64) + 2 * kt) * 128 + chunk * 16;
      cp_async_16(at + kValueBytes + kXBytes + i * 16, src, tile < kMetaTiles ? 16 : 0);
    }
  };

  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < kKTiles) load_stage(s, s);
    cp_async_commit();
  }
  const int my_tile = group * 4 + warp_in_group;  // the warp's 16 rows among the block's 8 tiles
  for (int kt = 0; kt < kKTiles; ++kt) {
    cp_async_wait<kStages - 2>();
    wgmma::fence_shared_for_async();
    __syncthreads();
    const int next = kt + kStages - 1;
    if (next < kKTiles) load_stage(next % kStages, next);
    cp_async_commit();

    const int stage = kt % kStages;
    const unsigned at = base + stage * kStageBytes;
    const unsigned* stage_meta = reinterpret_cast<const unsigned*>(smem + stage * kStageBytes + kValueBytes + kXBytes);
    const unsigned e0 = stage_meta[(my_tile * 2 + 0) * 32 + lane], e1 = stage_meta[(my_tile * 2 + 1) * 32 + lane];
    const unsigned a_tile = at + group * 64 * 128, b_tile = at + kValueBytes;
    wgmma::fence();
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const unsigned long long a = wgmma::k_major(a_tile, kBlockN, s);      // 32 bytes a step
      const unsigned long long b = wgmma::k_major(b_tile, kBlockM, 2 * s);  // 64 bytes a step
      const unsigned e = s < 2 ? e0 : e1;
      if (s % 2 == 0) wgmma::wgmma_sp_m64n128k32<0>(acc, a, b, e);
      else wgmma::wgmma_sp_m64n128k32<1>(acc, a, b, e);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::pin(acc);
  }
  cp_async_wait<0>();

  // acc[4 j + c]: weight row 16 warp + g (+ 8 for c >= 2), x row 8 j + 2 t + c % 2.
  Y* y = static_cast<Y*>(p.y);
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int c = 0; c < 4; c += 2) {
    const int n = n0 + group * 64 + warp_in_group * 16 + g + (c ? 8 : 0);
    if (n >= kN) continue;
    const float bias = Config::kBias ? to_float(static_cast<const bf16*>(p.bias)[n]) : 0.0f;
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = m0 + 8 * j + 2 * t + h;
        if (m < p.rows) y[(long long)m * kN + n] = from_float<Y>(acc[4 * j + c + h] + bias);
      }
  }
}

}  // namespace kernels
}  // namespace kiln

#endif  // __CUDACC__ || __CUDACC_RTC__
