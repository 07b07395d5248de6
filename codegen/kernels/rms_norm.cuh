// RMSNorm over rows, optionally with the residual add fused in front
// (pre-norm transformer blocks). Element types are the instance's: the
// residual stream (x, sum) may be f32 while the branch output (residual)
// and the normalized output are bf16.
//
//   x [rows, hidden] Config::X, residual [rows, hidden] Config::Residual,
//   weight [hidden] Config::Weight
//   sum_out [rows, hidden] Config::Sum = round_Sum(x + residual)   (kWritesSum)
//   out     [rows, hidden] Config::Out = s / sqrt(mean(s^2) + eps) · weight,
//           s = x or the sum rounded to Config::Sum
//
// One row per block; each thread keeps its 16-byte slices of the row in
// registers, so the row is read once. The sum of squares is accumulated in
// f32 with a warp-shuffle + shared-memory block reduction. The weight is
// loaded before waiting on the previous kernel.
// Grid [rows], block [Config::kThreads].
#pragma once

#include "common.cuh"

namespace kiln {
namespace kernels {

// Config: using X, Residual, Sum, Out, Weight; static constexpr int kHidden, kThreads;
//         static constexpr float kEpsilon; static constexpr bool kResidual, kWritesSum.
template <class Config>
__device__ __forceinline__ void rms_norm(const RmsNormParams& p) {
  static_assert(Config::kHidden % 8 == 0, "rows are read 8 elements (16 bytes) at a time");
  constexpr int kVecs = Config::kHidden / 8;
  constexpr int kPerThread = (kVecs + Config::kThreads - 1) / Config::kThreads;
  using W = typename Config::Weight;
  // The weight never depends on an earlier kernel: requested before waiting
  // for the one that writes x (wait_for_previous_kernel, common.cuh).
  float w[kPerThread][8];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int vec = threadIdx.x + i * Config::kThreads;
    if (vec < kVecs) load8_nc(static_cast<const W*>(p.weight) + vec * 8, w[i]);
  }
  wait_for_previous_kernel();
  allow_next_kernel();
  const int row = blockIdx.x;
  if (row >= p.rows) return;
  const long long base = (long long)row * Config::kHidden;
  const typename Config::X* x = static_cast<const typename Config::X*>(p.x) + base;

  float v[kPerThread][8];
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int vec = threadIdx.x + i * Config::kThreads;
    if (vec < kVecs) {
      load8(x + vec * 8, v[i]);
      if (Config::kResidual) {
        float r[8];
        load8(static_cast<const typename Config::Residual*>(p.residual) + base + vec * 8, r);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[i][e] = round_to<typename Config::Sum>(v[i][e] + r[e]);
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) sum_sq += v[i][e] * v[i][e];
    }
  }
  sum_sq = block_sum<Config::kThreads>(sum_sq);
  const float inv_rms = rsqrtf(sum_sq / (float)Config::kHidden + Config::kEpsilon);
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int vec = threadIdx.x + i * Config::kThreads;
    if (vec < kVecs) {
      if (Config::kWritesSum) store8(static_cast<typename Config::Sum*>(p.sum_out) + base + vec * 8, v[i]);
      float y[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) y[e] = v[i][e] * inv_rms * w[i][e];
      store8(static_cast<typename Config::Out*>(p.out) + base + vec * 8, y);
    }
  }
}

}  // namespace kernels
}  // namespace kiln
