// Warms L2 with the weights of the next skinny GEMM while the kernels
// before it (attention, a norm) leave HBM idle.
//
// A batch-1 decode step streams every weight once, so the step is as fast
// as HBM is kept busy. Between two GEMVs sit kernels that read almost
// nothing: decode attention over a short context, the norms. The executor
// launches this kernel on a side stream as soon as the GEMV before such a
// window ends, so the next GEMV's first rows are on their way from HBM
// while the window runs, and that GEMV then reads them from L2.
//
//   [base, base + bytes): the byte range to ask L2 for, in 128-byte lines
//
// prefetch.global.L2 is a hint with no result: a thread issues its lines
// and exits without waiting for them, so the kernel holds SM slots only
// for the few microseconds its warps take to issue.
// Grid [blocks], block [Config::kThreads]; not part of the programmatic
// launch chain (it is nobody's predecessor), so it does not wait.
#pragma once

#include "common.cuh"

namespace kiln {
namespace kernels {

// Config: static constexpr int kThreads.
template <class Config>
__device__ __forceinline__ void l2_prefetch(const L2PrefetchParams& p) {
  constexpr long long kLine = 128;
  const char* base = static_cast<const char*>(p.base);
  const long long lines = (p.bytes + kLine - 1) / kLine;
  const long long stride = (long long)gridDim.x * Config::kThreads;
  for (long long line = (long long)blockIdx.x * Config::kThreads + threadIdx.x; line < lines; line += stride)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(base + line * kLine));
}

}  // namespace kernels
}  // namespace kiln
