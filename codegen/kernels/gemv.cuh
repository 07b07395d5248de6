// Skinny GEMM for decode-shaped batches: y = x · Wᵀ (+ bias) with few rows.
// Memory-bound on W, so the kernel is built to stream W at HBM speed:
// 16-byte loads through the read-only path, kUnroll loads in flight per lane
// before any math, each weight row split over kSplitK warps (split-K inside
// the block, reduced through shared memory in a fixed order, so the result
// does not depend on the batch size or timing: no atomics).
//
//   x [rows, K] bf16, W [N, K] (Config::Weight), bias [N], y [rows, N] bf16
//
// Block: kRowsPerBlock weight rows x kSplitK warps; it handles up to kMaxRows
// rows of x (grid.z walks further groups of kMaxRows rows).
// Grid [ceil(N / kRowsPerBlock), 1, ceil(rows / kMaxRows)], block [32 kRowsPerBlock kSplitK].
#pragma once

#include "common.cuh"

namespace kiln {
namespace kernels {

// Config: using Weight; static constexpr int kN, kK, kMaxRows, kRowsPerBlock, kSplitK, kUnroll;
//         static constexpr bool kBias.
template <class Config>
__device__ __forceinline__ void gemv(const GemvParams& p) {
  using W = typename Config::Weight;
  constexpr int kK = Config::kK, kM = Config::kMaxRows, kSplit = Config::kSplitK;
  constexpr int kUnroll = Config::kUnroll;
  constexpr int kVecs = kK / 8;                    // 8-element vectors per row
  constexpr int kStride = 32 * kSplit;             // vectors between a lane's steps
  static_assert(kK % 8 == 0, "K is a multiple of 8");
  __shared__ float partial[Config::kRowsPerBlock * kSplit][kM];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n_local = warp / kSplit, split = warp % kSplit;
  const int n = blockIdx.x * Config::kRowsPerBlock + n_local;
  const int m0 = blockIdx.z * kM;
  const int m_count = min(kM, p.rows - m0);
  const bf16* x = static_cast<const bf16*>(p.x) + (long long)m0 * kK;

  float acc[kM];
#pragma unroll
  for (int m = 0; m < kM; ++m) acc[m] = 0.0f;
  if (n < Config::kN) {
    const W* w = static_cast<const W*>(p.w) + (long long)n * kK;
    for (int v0 = split * 32 + lane; v0 < kVecs; v0 += kStride * kUnroll) {
      float wv[kUnroll][8];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {  // all loads first: kUnroll in flight
        const int v = v0 + u * kStride;
        if (v < kVecs) load8_nc(w + v * 8, wv[u]);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int v = v0 + u * kStride;
        if (v >= kVecs) break;
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          if (m >= m_count) break;
          float xv[8];
          load8(x + (long long)m * kK + v * 8, xv);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[m] += wv[u][e] * xv[e];
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    const float s = warp_sum(acc[m]);
    if (lane == 0) partial[warp][m] = s;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < Config::kRowsPerBlock * kM; i += blockDim.x) {
    const int r = i / kM, m = i % kM;
    const int row_n = blockIdx.x * Config::kRowsPerBlock + r;
    if (row_n >= Config::kN || m >= m_count) continue;
    float sum = 0.0f;
    for (int s = 0; s < kSplit; ++s) sum += partial[r * kSplit + s][m];
    if (Config::kBias) sum += to_float(static_cast<const W*>(p.bias)[row_n]);
    static_cast<bf16*>(p.y)[(long long)(m0 + m) * Config::kN + row_n] = from_float<bf16>(sum);
  }
}

}  // namespace kernels
}  // namespace kiln
