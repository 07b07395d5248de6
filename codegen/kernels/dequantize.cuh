// A packed block-quantized weight (quant_blocks.cuh) expanded to bf16 rows,
// for the batches whose GEMM cuBLASLt runs: those read W once per row of
// x anyway, and the expansion costs a pass over W beside a GEMM of many
// rows. Each thread writes 8 consecutive elements with one 16-byte store.
//
//   w [N, K] packed (Config::Weight), out [N, K] bf16
//
// Grid [ceil(N K / 8 / kThreads)], block [Config::kThreads].
#pragma once

#include "common.cuh"
#include "quant_blocks.cuh"

namespace kiln {
namespace kernels {

// Config: using Weight; static constexpr int kN, kK, kThreads.
template <class Config>
__device__ __forceinline__ void dequantize(const DequantizeParams& p) {
  constexpr long long kVecs = (long long)Config::kN * Config::kK / 8;
  constexpr int kRowVecs = Config::kK / 8;
  const long long vec = (long long)blockIdx.x * Config::kThreads + threadIdx.x;
  if (vec >= kVecs) return;
  // The weights never change: read them before the previous kernel ends;
  // out may still be read by the previous GEMM, so write after it.
  float values[8];
  load8_packed<typename Config::Weight, Config::kN, Config::kK>(p.w, vec / kRowVecs, int(vec % kRowVecs), values,
                                                                l2_policy_evict_first());
  wait_for_previous_kernel();
  allow_next_kernel();
  store8(static_cast<bf16*>(p.out) + vec * 8, values);
}

}  // namespace kernels
}  // namespace kiln
