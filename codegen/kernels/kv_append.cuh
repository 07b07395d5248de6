// kv_append: the keys and values of an attention layer without positional
// encoding (Nemotron-H's), written unrotated into the paged pools:
//   k, v      [N, Hkv · D] X
//   k_pool    [num_blocks, page_size, Hkv, D] Kv (bf16 or f32), v_pool likewise
//   slot_mapping [N] i32: token t goes to slot slot_mapping[t] (block ·
//             page_size + offset), row [Hkv · D] at slot · Hkv · D; a slot
//             < 0 or >= num_slots writes nothing.
// Grid [N], kThreads threads, each a run of the row's Hkv · D elements.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common.cuh"
#endif
#include "kernel_params.cuh"

namespace kiln {
namespace kernels {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(KILN_CUDA_EMULATION)

// Config: using X, Kv; static constexpr int kRow (Hkv · D), kThreads.
template <class Config>
__device__ __forceinline__ void kv_append(const KvAppendParams& p) {
  using X = typename Config::X;
  using Kv = typename Config::Kv;
  constexpr int kRow = Config::kRow;
  const int t = blockIdx.x;
  if (t >= p.num_tokens) return;
  const int slot = p.slot_mapping[t];
  if (slot < 0 || (long long)slot >= p.num_slots) return;
  const X* k = static_cast<const X*>(p.k) + (long long)t * kRow;
  const X* v = static_cast<const X*>(p.v) + (long long)t * kRow;
  Kv* k_row = static_cast<Kv*>(p.k_pool) + (long long)slot * kRow;
  Kv* v_row = static_cast<Kv*>(p.v_pool) + (long long)slot * kRow;
  for (int i = threadIdx.x; i < kRow; i += Config::kThreads) {
    k_row[i] = from_float<Kv>(to_float(k[i]));
    v_row[i] = from_float<Kv>(to_float(v[i]));
  }
}

#endif

}  // namespace kernels
}  // namespace kiln
