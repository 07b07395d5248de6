// Attention over a ragged batch whose keys and values live in the paged pool:
// prefill chunks and decode tokens of many sequences in one launch, GQA,
// causal or tree-masked, FlashAttention-style online softmax (one pass over
// the keys with a running max and sum, f32 accumulation).
//
//   q            [N, H, D] (Config::Q: bf16, or f32 in f32 plans; already roped)
//   k_pool/v_pool [num_blocks, page_size, Hkv, D] (Config::Kv: bf16, f32, or
//                KvInt8 / KvE4M3 codes, each row times its scale from
//                k_scales/v_scales [num_blocks, Hkv, page_size], kv_quant.cuh)
//   block_tables [B, max_blocks_per_seq] i32; key j of sequence b lives at
//                slot block_tables[b][j / page_size] * page_size + j % page_size
//   query_start  [B + 1] i32: sequence b owns tokens [query_start[b], query_start[b+1])
//   kv_lens      [B] i32: context length including this step's (already appended) tokens
//   tree_mask    [N, tree_stride] u8 (kTreeMask): query t of sequence b (q_len tokens)
//                sees every key j < kv_len - q_len, and tree key j >= kv_len - q_len
//                iff tree_mask[t][j - (kv_len - q_len)] != 0
//   out          [N, H, D] (Config::Out)
//
// Causal rule: query i of sequence b sits at position kv_len - q_len + i and
// sees keys 0..that position, or with a sliding window W (Config::kWindow,
// attention_window.cuh) its last W of them; keys before are never read. A
// query that sees no key gets zeros.
//
// Work split: one block per (token, kv head) serves the token's whole GQA
// group (H / Hkv query heads) so each K/V row is read once per group. Keys go
// in chunks of kThreads: (a) thread j scores key j against every head of the
// group, (b) one warp per head folds the chunk into the running max/sum,
// (c) every thread updates its slice of the [group, D] output accumulator.
// Split-KV (kSplit): blockIdx.z takes one contiguous key range, the kernel
// writes unnormalized-free partials (o / l and lse = m + log l) and
// attention_combine merges them; this gives long decode contexts enough blocks.
// Grid [N, Hkv, splits], block [kThreads].
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common.cuh"
#endif
#include "attention_window.cuh"
#include "kv_quant.cuh"
#include "split_kv.cuh"

namespace kiln {
namespace kernels {

// Index of the sequence owning token t: the b with query_start[b] <= t < query_start[b+1].
__device__ __forceinline__ int owning_sequence(const int* query_start, int num_seqs, int t) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_start[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Config: using Kv, Q, Out; static constexpr int kHeads, kKvHeads, kHeadDim, kPageSize, kThreads;
//         static constexpr float kScale; static constexpr bool kTreeMask, kSplit;
//         optionally static constexpr int kWindow (not with kTreeMask).
template <class Config>
__device__ __forceinline__ void paged_attention(const PagedAttentionParams& p) {
  constexpr int D = Config::kHeadDim, Hkv = Config::kKvHeads;
  constexpr int kGroup = Config::kHeads / Hkv;
  constexpr int kThreads = Config::kThreads, kChunk = kThreads, kWarps = kThreads / 32;
  constexpr int kPairs = kGroup * D / 2;                      // output pairs of the group
  constexpr int kPairsPerThread = (kPairs + kThreads - 1) / kThreads;
  static_assert(Config::kHeads % Hkv == 0, "GQA: heads is a multiple of kv_heads");
  static_assert(D % 8 == 0 && kThreads % 32 == 0, "shape");
  constexpr int kWindow = AttentionWindow<Config>::value;
  static_assert(kWindow >= 0 && !(kWindow > 0 && Config::kTreeMask), "a window, or a tree mask");
  using Kv = typename Config::Kv;
  constexpr bool kScaled = KvScaled<Kv>::value;
  // Head-dim steps of 8 unrolled in the scoring loop: 4 for 1- and 2-byte
  // pools; f32 rows are twice the loads a step, where 4 spilled (32/8 heads,
  // head_dim 64).
  constexpr int kDimSteps = sizeof(Kv) <= 2 ? 4 : 2;

  __shared__ float q_s[kGroup][D];          // scaled queries of the group
  __shared__ float p_s[kGroup][kChunk];     // scores, then probabilities, of the chunk
  __shared__ long long slot_s[kChunk];      // pool row of each key of the chunk
  __shared__ float v_scale_s[kScaled ? kChunk : 1];  // scaled pools: each key's V scale
  __shared__ float m_s[kGroup], l_s[kGroup], alpha_s[kGroup];

  const int t = blockIdx.x, kvh = blockIdx.y;
  if (t >= p.num_tokens) return;
  const int b = owning_sequence(p.query_start, p.num_seqs, t);
  const int q_begin = p.query_start[b], q_len = p.query_start[b + 1] - q_begin;
  const int kv_len = p.kv_lens[b];
  const int prefix = kv_len - q_len;  // keys before this step's tokens
  const int key_end = Config::kTreeMask ? kv_len : prefix + (t - q_begin) + 1;
  const int key_begin = window_begin(kWindow, key_end - 1);  // the window's first key (0: none)
  int begin = key_begin, end = key_end;
  if (Config::kSplit) {
    const int per_split =
        ((key_end - key_begin + p.num_splits - 1) / p.num_splits + kChunk - 1) / kChunk * kChunk;
    begin = min(key_end, key_begin + (int)blockIdx.z * per_split);
    end = min(key_end, begin + per_split);
  }
  const int* table = p.block_tables + (long long)b * p.max_blocks_per_seq;
  const unsigned char* mask_row =
      Config::kTreeMask ? p.tree_mask + (long long)t * p.tree_stride : nullptr;

  using Q = typename Config::Q;
  const Q* q = static_cast<const Q*>(p.q) + ((long long)t * Config::kHeads + kvh * kGroup) * D;
  for (int i = threadIdx.x; i < kGroup * D; i += kThreads)
    q_s[i / D][i % D] = to_float(q[i]) * Config::kScale;
  if (threadIdx.x < kGroup) {
    m_s[threadIdx.x] = neg_inf();
    l_s[threadIdx.x] = 0.0f;
  }
  float acc[kPairsPerThread][2];
#pragma unroll
  for (int i = 0; i < kPairsPerThread; ++i) acc[i][0] = acc[i][1] = 0.0f;
  const Kv* k_pool = static_cast<const Kv*>(p.k_pool);
  const Kv* v_pool = static_cast<const Kv*>(p.v_pool);
  __syncthreads();

  for (int c0 = begin; c0 < end; c0 += kChunk) {
    const int n = min(kChunk, end - c0);
    // (a) scores of key j = c0 + threadIdx.x against the group's heads.
    {
      const int j = c0 + threadIdx.x;
      float s[kGroup];
#pragma unroll
      for (int r = 0; r < kGroup; ++r) s[r] = neg_inf();
      if (threadIdx.x < n) {
        const long long slot = (long long)table[j / Config::kPageSize] * Config::kPageSize + j % Config::kPageSize;
        slot_s[threadIdx.x] = slot;
        const bool visible = !Config::kTreeMask || j < prefix || mask_row[j - prefix] != 0;
        if (visible) {
          const Kv* key = k_pool + (slot * Hkv + kvh) * D;
#pragma unroll
          for (int r = 0; r < kGroup; ++r) s[r] = 0.0f;
#pragma unroll(kDimSteps)
          for (int d = 0; d < D; d += 8) {
            float kv[8];
            kv_load8(key + d, kv);
#pragma unroll
            for (int r = 0; r < kGroup; ++r)
#pragma unroll
              for (int e = 0; e < 8; ++e) s[r] += q_s[r][d + e] * kv[e];
          }
          if constexpr (kScaled) {  // the key's codes times its scale
            const float k_scale = p.k_scales[kv_scale_index<Config::kPageSize, Hkv>(slot, kvh)];
#pragma unroll
            for (int r = 0; r < kGroup; ++r) s[r] *= k_scale;
          }
        }
        if constexpr (kScaled) v_scale_s[threadIdx.x] = p.v_scales[kv_scale_index<Config::kPageSize, Hkv>(slot, kvh)];
      }
#pragma unroll
      for (int r = 0; r < kGroup; ++r) p_s[r][threadIdx.x] = s[r];
    }
    __syncthreads();
    // (b) online-softmax update, one warp per head of the group.
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int r = warp; r < kGroup; r += kWarps) {
      float cmax = neg_inf();
      for (int j = lane; j < kChunk; j += 32) cmax = fmaxf(cmax, p_s[r][j]);
      cmax = warp_max(cmax);
      const float m_old = m_s[r];
      const float m_new = fmaxf(m_old, cmax);
      float sum = 0.0f;
      for (int j = lane; j < kChunk; j += 32) {
        const float e = m_new == neg_inf() ? 0.0f : expf(p_s[r][j] - m_new);
        p_s[r][j] = e;
        sum += e;
      }
      sum = warp_sum(sum);
      // Every lane has read m_s[r] above; order those reads before lane 0's
      // writes explicitly (compute-sanitizer's racecheck does not count the
      // shuffles as ordering shared memory).
      __syncwarp();
      if (lane == 0) {
        const float alpha = m_old == neg_inf() ? 0.0f : expf(m_old - m_new);
        alpha_s[r] = alpha;
        l_s[r] = l_s[r] * alpha + sum;
        m_s[r] = m_new;
      }
    }
    __syncthreads();
    // (c) acc[r][d] = acc[r][d] * alpha[r] + sum_j p[r][j] * V[j][d].
#pragma unroll
    for (int i = 0; i < kPairsPerThread; ++i) {
      const int pair = threadIdx.x + i * kThreads;
      if (pair < kPairs) {
        const int r = pair / (D / 2), d = pair % (D / 2) * 2;
        const float alpha = alpha_s[r];
        float a0 = acc[i][0] * alpha, a1 = acc[i][1] * alpha;
        for (int j = 0; j < n; ++j) {
          float pj = p_s[r][j];
          if constexpr (kScaled) pj *= v_scale_s[j];  // the value's codes times its scale
          const Kv* val = v_pool + (slot_s[j] * Hkv + kvh) * D + d;
          a0 += pj * kv_load1(val);
          a1 += pj * kv_load1(val + 1);
        }
        acc[i][0] = a0;
        acc[i][1] = a1;
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < kPairsPerThread; ++i) {
    const int pair = threadIdx.x + i * kThreads;
    if (pair >= kPairs) continue;
    const int r = pair / (D / 2), d = pair % (D / 2) * 2;
    const int h = kvh * kGroup + r;
    const float l = l_s[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    if (Config::kSplit) {
      const long long row = ((long long)t * Config::kHeads + h) * p.num_splits + blockIdx.z;
      p.partial_out[row * D + d] = acc[i][0] * inv;
      p.partial_out[row * D + d + 1] = acc[i][1] * inv;
      if (d == 0) p.partial_lse[row] = l > 0.0f ? m_s[r] + logf(l) : neg_inf();
    } else {
      using Out = typename Config::Out;
      Out* o = static_cast<Out*>(p.out) + ((long long)t * Config::kHeads + h) * D + d;
      o[0] = from_float<Out>(acc[i][0] * inv);
      o[1] = from_float<Out>(acc[i][1] * inv);
    }
  }
}

// Merges split-KV partials: out = sum_z exp(lse_z - M) o_z / sum_z exp(lse_z - M).
// out [N, H, D] (Config::Out).
// Config: using Out; static constexpr int kHeads, kHeadDim, kThreads. Grid [N, H], block [kThreads].
template <class Config>
__device__ __forceinline__ void attention_combine(const AttentionCombineParams& p) {
  constexpr int D = Config::kHeadDim;
  const int t = blockIdx.x, h = blockIdx.y;
  if (t >= p.num_tokens) return;
  const long long row = (long long)t * Config::kHeads + h;
  for (int d = threadIdx.x; d < D; d += Config::kThreads)
    static_cast<typename Config::Out*>(p.out)[row * D + d] =
        from_float<typename Config::Out>(merge_split_partials(p.partial_out, p.partial_lse, row, p.num_splits, D, d));
}

}  // namespace kernels
}  // namespace kiln
