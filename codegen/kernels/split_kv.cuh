// Split-KV partials and their merge, shared by attention_combine
// (paged_attention.cuh) and decode_attention's fused combine.
//
//   partial_out [N, H, splits, D] f32: split z's output, normalized by its own sum
//   partial_lse [N, H, splits] f32: the split's log-sum-exp (-inf: no keys)
//   out = sum_z exp(lse_z - M) o_z / sum_z exp(lse_z - M), M = max_z lse_z
#pragma once

#include "tensor_core.cuh"  // KILN_HOST_DEVICE
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common.cuh"
#endif

namespace kiln {
namespace kernels {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
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
#endif

// decode_attention with split_arrivals set: after every thread has written
// its partials, the last of a (token, kv head)'s num_splits blocks to arrive
// merges the group's G heads into out and resets the counter for the next
// launch, so no attention_combine launch follows. The merge is that of
// merge_split_partials, arranged for latency: one block does it while the
// rest of the GPU waits, and each round trip to L2 is most of its cost.
//   1. Every lse of the group, all loads in flight at once, into shared memory.
//   2. Per head, one warp: the weights exp(lse - M) and 1 / their sum.
//   3. The partials as float4 columns (4 consecutive dimensions of a head),
//      kBatch splits' loads in flight per thread. When the group has fewer
//      columns than the block has threads, `slices` threads share a column,
//      each taking every slices-th split, and add up through shared memory.
//      A thread's first batch does not depend on the lse: it is requested
//      beside them, before step 1, so their round trips overlap.
// At G = 4, D = 128 and up to 16 splits that is one round trip to L2 for
// the loads (two at 32 splits), where a scalar loop took sixteen. `scratch`
// is shared memory no thread still reads, combine_scratch_floats(G, D,
// num_splits, kThreads) floats of it.
KILN_HOST_DEVICE constexpr int combine_slices(int G, int D, int threads) {
  return G * D / 4 >= threads ? 1 : threads / (G * D / 4);
}
KILN_HOST_DEVICE constexpr int combine_weights_floats(int G, int splits) { return (1 + G * splits + G + 3) / 4 * 4; }
KILN_HOST_DEVICE constexpr int combine_scratch_floats(int G, int D, int splits, int threads) {
  return combine_weights_floats(G, splits) + (combine_slices(G, D, threads) > 1 ? combine_slices(G, D, threads) * G * D : 0);
}
// The most splits the fused merge takes (its shared memory is sized for them).
constexpr int kMaxMergedSplits = 128;

#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(KILN_CUDA_EMULATION)
// A block's arrival at a GPU-scope counter, as one thread's acquire-release
// atomic after a block barrier: the release is cumulative, so it publishes
// every write the block's threads made before the barrier, and the acquire
// lets the last block read every other block's. One fenced atomic where a
// __threadfence in every thread made each of them wait for its own writes.
__device__ __forceinline__ unsigned count_in_acq_rel(unsigned* counter) {
#if defined(KILN_CUDA_EMULATION)
  return atomicAdd(counter, 1u);  // the emulated device is sequentially consistent
#else
  unsigned before;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(counter) : "memory");
  return before;
#endif
}

template <int G, int D, int kThreads>
__device__ __forceinline__ void combine_if_last_split(const PagedAttentionParams& p, int t, int kvh, int kv_heads,
                                                      float* scratch) {
  static_assert(D % 4 == 0 && kThreads % 32 == 0, "float4 columns, whole warps");
  constexpr int kCols = G * D / 4, kSlices = combine_slices(G, D, kThreads), kBatch = 16;
  constexpr int kMaxLsePerThread = (16 * kMaxMergedSplits + kThreads - 1) / kThreads;
  unsigned* const flag = reinterpret_cast<unsigned*>(scratch);
  const int splits = p.num_splits, H = G * kv_heads, tid = threadIdx.x;
  float* const weight_s = scratch + 1;                 // [G][splits]: exp(lse - M)
  float* const inv_sum_s = weight_s + G * splits;      // [G]
  float4* const slice_s = reinterpret_cast<float4*>(scratch + combine_weights_floats(G, splits));  // [kSlices][kCols]
  const long long row0 = (long long)t * H + (long long)kvh * G;  // the group's first (token, head) row
  __syncthreads();  // every thread's partials are written: one release below orders them all
  if (tid == 0) {
    const unsigned arrived = count_in_acq_rel(p.split_arrivals + (long long)t * kv_heads + kvh);
    *flag = arrived == unsigned(splits - 1) ? 1u : 0u;
  }
  __syncthreads();  // the last block's threads read the partials after thread 0's acquire
  if (*flag == 0u) return;

  // This thread's column(s): column c is dimensions 4(c % (D/4)) .. + 3 of
  // head c / (D/4); its splits slice, slice + kSlices, ...
  const int slice = kSlices == 1 ? 0 : tid / kCols;
  const int first_col = kSlices == 1 ? tid : tid % kCols;
  auto column = [&](int c) {
    return reinterpret_cast<const float4*>(p.partial_out + (row0 + c / (D / 4)) * splits * D) + c % (D / 4);
  };
  auto load_batch = [&](const float4* po, int z0, float4 (&v)[kBatch]) {
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int z = z0 + k * kSlices;
      v[k] = z < splits ? __ldcg(po + (long long)z * (D / 4)) : float4{0.0f, 0.0f, 0.0f, 0.0f};
    }
  };
  float4 first_batch[kBatch];
  if (slice < kSlices) load_batch(column(first_col), slice, first_batch);

  // 1. The group's G x splits lse, contiguous from row0's.
  {
    const float* lse = p.partial_lse + row0 * splits;
    float v[kMaxLsePerThread];
#pragma unroll
    for (int k = 0; k < kMaxLsePerThread; ++k) {
      const int i = tid + k * kThreads;
      v[k] = i < G * splits ? __ldcg(lse + i) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kMaxLsePerThread; ++k)
      if (tid + k * kThreads < G * splits) weight_s[tid + k * kThreads] = v[k];
  }
  __syncthreads();
  // 2. Warp w takes heads w, w + warps, ...; its lanes the splits.
  for (int r = tid / 32; r < G; r += kThreads / 32) {
    float* const w = weight_s + r * splits;
    float m = neg_inf();
    for (int z = tid % 32; z < splits; z += 32) m = fmaxf(m, w[z]);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0.0f;
    for (int z = tid % 32; z < splits; z += 32) {
      const float e = m == neg_inf() || w[z] == neg_inf() ? 0.0f : expf(w[z] - m);
      w[z] = e;
      sum += e;
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (tid % 32 == 0) inv_sum_s[r] = sum > 0.0f ? 1.0f / sum : 0.0f;
  }
  __syncthreads();
  // 3. Each column's weighted sum over the splits goes out normalized, in bf16.
  auto write_column = [&](int c, const float4& acc) {
    const int r = c / (D / 4);
    bf16* const out = static_cast<bf16*>(p.out) + (row0 + r) * D + (c % (D / 4)) * 4;
    const float inv = inv_sum_s[r];
    out[0] = from_float<bf16>(acc.x * inv), out[1] = from_float<bf16>(acc.y * inv);
    out[2] = from_float<bf16>(acc.z * inv), out[3] = from_float<bf16>(acc.w * inv);
  };
  if (slice < kSlices) {
    for (int c = first_col; c < kCols; c += kThreads) {
      const float* w = weight_s + c / (D / 4) * splits;
      float4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int z0 = slice; z0 < splits; z0 += kBatch * kSlices) {
        float4 v[kBatch];
        if (c == first_col && z0 == slice) {
#pragma unroll
          for (int k = 0; k < kBatch; ++k) v[k] = first_batch[k];
        } else {
          load_batch(column(c), z0, v);
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          const int z = z0 + k * kSlices;
          const float wz = z < splits ? w[z] : 0.0f;
          acc.x += wz * v[k].x, acc.y += wz * v[k].y, acc.z += wz * v[k].z, acc.w += wz * v[k].w;
        }
      }
      if (kSlices > 1) slice_s[slice * kCols + c] = acc;
      else write_column(c, acc);
    }
  }
  if (kSlices > 1) {
    __syncthreads();
    for (int c = tid; c < kCols; c += kThreads) {
      float4 acc = slice_s[c];
#pragma unroll
      for (int s = 1; s < kSlices; ++s) {
        const float4 v = slice_s[s * kCols + c];
        acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
      }
      write_column(c, acc);
    }
  }
  if (tid == 0) p.split_arrivals[(long long)t * kv_heads + kvh] = 0u;
}
#endif

}  // namespace kernels
}  // namespace kiln
