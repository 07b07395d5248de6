// Greedy decoding on the GPU: each row's argmax over the vocabulary, so a
// greedy batch copies back one i32 per row instead of its logits (256 KB
// per row at a 128K vocabulary, then a host scan).
//
//   logits [rows, vocab] (Config::Logit) -> out_tokens [rows] i32
//
// The token is the largest logit, NaN ignored, lowest id on ties (0 when a
// row has no number): the host sampler's greedy rule, so both paths give
// the same tokens. Grid [rows, kChunks], block [kThreads]: block (r, c)
// scans chunk c of row r with 16-byte loads and leaves its best (value, id)
// in `partial`; the last block of the row to arrive (counted in `arrivals`,
// which it resets to 0 for the next launch) reduces the kChunks partials.
// The result does not depend on which block arrives last: (value, lower id)
// is a total order.
#pragma once

#include "common.cuh"

namespace kiln {
namespace kernels {

struct ArgmaxCandidate {
  float value;
  int id;  // kNoId: no number seen
};

constexpr int kNoId = 0x7fffffff;

__device__ __forceinline__ bool argmax_better(float v, int i, const ArgmaxCandidate& best) {
  return v > best.value || (v == best.value && i < best.id);
}

__device__ __forceinline__ void argmax_take(ArgmaxCandidate& best, float v, int i) {
  if (!isnan(v) && argmax_better(v, i, best)) best = {v, i};
}

// Every thread gets the block's best; `scratch` holds kThreads / 32 candidates.
template <int kThreads>
__device__ __forceinline__ ArgmaxCandidate block_argmax(ArgmaxCandidate best, ArgmaxCandidate* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best.value, o);
    const int i = __shfl_xor_sync(0xffffffffu, best.id, o);
    if (argmax_better(v, i, best)) best = {v, i};
  }
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = best;
  __syncthreads();
  best = scratch[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w)
    if (argmax_better(scratch[w].value, scratch[w].id, best)) best = scratch[w];
  return best;
}

// Config: using Logit; static constexpr int kVocab, kThreads, kChunks.
template <class Config>
__device__ __forceinline__ void argmax(const ArgmaxParams& p) {
  constexpr int V = Config::kVocab, kThreads = Config::kThreads, kChunks = Config::kChunks;
  // Chunks start on 8-element boundaries so that rows whose length is a
  // multiple of 8 are read in aligned 16-byte vectors.
  constexpr int kPerChunk = ((V + kChunks - 1) / kChunks + 7) / 8 * 8;
  constexpr bool kVectors = V % 8 == 0;
  using Logit = typename Config::Logit;
  __shared__ ArgmaxCandidate scratch[kThreads / 32];
  __shared__ bool last_s;

  const int row = blockIdx.x, chunk = blockIdx.y;
  if (row >= p.rows) return;
  const Logit* x = static_cast<const Logit*>(p.logits) + (long long)row * V;
  const int lo = chunk * kPerChunk, hi = min(V, lo + kPerChunk);
  ArgmaxCandidate best{neg_inf(), kNoId};
  if (kVectors) {
    for (int v = lo + threadIdx.x * 8; v < hi; v += kThreads * 8) {
      float e[8];
      load8(x + v, e);
#pragma unroll
      for (int j = 0; j < 8; ++j) argmax_take(best, e[j], v + j);
    }
  } else {
    for (int i = lo + threadIdx.x; i < hi; i += kThreads) argmax_take(best, to_float(x[i]), i);
  }
  best = block_argmax<kThreads>(best, scratch);
  if (kChunks == 1) {
    if (threadIdx.x == 0) p.out_tokens[row] = best.id == kNoId ? 0 : best.id;
    return;
  }
  if (threadIdx.x == 0) {
    p.partial_value[row * kChunks + chunk] = best.value;
    p.partial_id[row * kChunks + chunk] = best.id;
    __threadfence();  // the partial is visible before the arrival is counted
    last_s = atomicAdd(&p.arrivals[row], 1u) == kChunks - 1;
  }
  __syncthreads();
  if (!last_s) return;
  __threadfence();
  ArgmaxCandidate all{neg_inf(), kNoId};
  for (int c = threadIdx.x; c < kChunks; c += kThreads) {
    // Through L2: other blocks wrote these.
    const float v = __ldcg(p.partial_value + row * kChunks + c);
    const int i = __ldcg(p.partial_id + row * kChunks + c);
    if (i != kNoId && argmax_better(v, i, all)) all = {v, i};
  }
  __syncthreads();  // scratch is reused
  all = block_argmax<kThreads>(all, scratch);
  if (threadIdx.x == 0) {
    p.out_tokens[row] = all.id == kNoId ? 0 : all.id;
    p.arrivals[row] = 0;
  }
}

}  // namespace kernels
}  // namespace kiln
