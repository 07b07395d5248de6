// Split-KV partials and their merge, shared by attention_combine
// (paged_attention.cuh) and decode_attention's fused combine.
//
//   partial_out [N, H, splits, D] f32: split z's output, normalized by its own sum
//   partial_lse [N, H, splits] f32: the split's log-sum-exp (-inf: no keys)
//   out = sum_z exp(lse_z - M) o_z / sum_z exp(lse_z - M), M = max_z lse_z
#pragma once

#include "common.cuh"

namespace kiln {
namespace kernels {

// Dimension d of (token, head) row `row`'s merged output. The partials are
// read through L2 (__ldcg): other blocks of the same launch may have written
// them.
__device__ __forceinline__ float merge_split_partials(const float* partial_out, const float* partial_lse,
                                                      long long row, int num_splits, int head_dim, int d) {
  const float* lse = partial_lse + row * num_splits;
  float m = neg_inf();
  for (int z = 0; z < num_splits; ++z) m = fmaxf(m, __ldcg(lse + z));
  if (m == neg_inf()) return 0.0f;
  float num = 0.0f, den = 0.0f;
  for (int z = 0; z < num_splits; ++z) {
    const float l = __ldcg(lse + z);
    if (l == neg_inf()) continue;
    const float w = expf(l - m);
    num += w * __ldcg(partial_out + (row * num_splits + z) * head_dim + d);
    den += w;
  }
  return den > 0.0f ? num / den : 0.0f;
}

// decode_attention with split_arrivals set: after every thread has written
// its partials, the last of a (token, kv head)'s num_splits blocks to arrive
// merges the group's G heads into out and resets the counter for the next
// launch, so no attention_combine launch follows. `flag` is a word of the
// block's shared memory no thread still reads.
template <int G, int D, int kThreads>
__device__ __forceinline__ void combine_if_last_split(const PagedAttentionParams& p, int t, int kvh, int kv_heads,
                                                      unsigned* flag) {
  __threadfence();  // this thread's partials, before the block's arrival is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned arrived = atomicAdd(p.split_arrivals + (long long)t * kv_heads + kvh, 1u);
    *flag = arrived == unsigned(p.num_splits - 1) ? 1u : 0u;
  }
  __syncthreads();
  if (*flag == 0u) return;
  __threadfence();
  const int H = G * kv_heads;
  for (int i = threadIdx.x; i < G * D; i += kThreads) {
    const int r = i / D, d = i % D;
    const long long row = (long long)t * H + kvh * G + r;
    static_cast<bf16*>(p.out)[row * D + d] =
        from_float<bf16>(merge_split_partials(p.partial_out, p.partial_lse, row, p.num_splits, D, d));
  }
  if (threadIdx.x == 0) p.split_arrivals[(long long)t * kv_heads + kvh] = 0u;
}

}  // namespace kernels
}  // namespace kiln
