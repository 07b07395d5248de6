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
// launch, so no attention_combine launch follows. The merge is that of
// merge_split_partials, arranged for latency (one block does it while the
// rest of the GPU waits): every lse is loaded at once, the per-split weights
// go to shared memory, then every partial is loaded at once. `scratch` is
// shared memory no thread still reads, G * num_splits + 1 floats.
template <int G, int D, int kThreads>
__device__ __forceinline__ void combine_if_last_split(const PagedAttentionParams& p, int t, int kvh, int kv_heads,
                                                      float* scratch) {
  unsigned* const flag = reinterpret_cast<unsigned*>(scratch);
  float* const weight_s = scratch + 1;  // [G][splits]: exp(lse - M) / sum
  const int splits = p.num_splits, H = G * kv_heads;
  const long long row0 = (long long)t * H + (long long)kvh * G;  // the group's first (token, head) row
  __threadfence();  // this thread's partials, before the block's arrival is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned arrived = atomicAdd(p.split_arrivals + (long long)t * kv_heads + kvh, 1u);
    *flag = arrived == unsigned(splits - 1) ? 1u : 0u;
  }
  __syncthreads();
  if (*flag == 0u) return;
  __threadfence();
  for (int i = threadIdx.x; i < G * splits; i += kThreads) weight_s[i] = __ldcg(p.partial_lse + row0 * splits + i);
  __syncthreads();
  for (int r = threadIdx.x; r < G; r += kThreads) {
    float m = neg_inf(), den = 0.0f;
    for (int z = 0; z < splits; ++z) m = fmaxf(m, weight_s[r * splits + z]);
    for (int z = 0; z < splits; ++z) {
      const float l = weight_s[r * splits + z];
      const float w = m == neg_inf() || l == neg_inf() ? 0.0f : expf(l - m);
      weight_s[r * splits + z] = w;
      den += w;
    }
    for (int z = 0; z < splits; ++z) weight_s[r * splits + z] = den > 0.0f ? weight_s[r * splits + z] / den : 0.0f;
  }
  __syncthreads();
  constexpr int kBatch = 8;  // partial loads in flight per thread
  for (int i = threadIdx.x; i < G * D; i += kThreads) {
    const int r = i / D, d = i % D;
    const float* po = p.partial_out + ((row0 + r) * splits) * D + d;
    float acc = 0.0f;
    for (int z0 = 0; z0 < splits; z0 += kBatch) {
      float v[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) v[b] = z0 + b < splits ? __ldcg(po + (long long)(z0 + b) * D) : 0.0f;
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
        if (z0 + b < splits) acc += weight_s[r * splits + z0 + b] * v[b];
    }
    static_cast<bf16*>(p.out)[(row0 + r) * D + d] = from_float<bf16>(acc);
  }
  if (threadIdx.x == 0) p.split_arrivals[(long long)t * kv_heads + kvh] = 0u;
}

}  // namespace kernels
}  // namespace kiln
