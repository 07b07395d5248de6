// Mixture-of-experts routing and the routed SwiGLU experts, for decode-
// shaped batches (few rows a step).
//
//   moe_router:  x [rows, H] X, Wr [E, H] W -> weights [rows, K] Out, ids [rows, K] i32
//                one block a token: the router GEMV (E dot products of H),
//                logits rounded to Out (the GEMM's output type), softmax in
//                f32, the K largest (lowest id first among equals),
//                renormalized to sum 1 with kNormalize.
//   moe_gate_up: act [slot, F] = silu(gate[e] x) · up[e] x, e = ids[slot]
//   moe_down:    partial [slot, H] = weights[slot] · down[e] act[slot]
//   moe_combine: out [t, H] = Σ_k partial[t K + k] (k in order: no atomics,
//                so a token's output does not depend on its batch)
//
// gate_up and down run a grid [E, column tiles]: each block first gathers
// the slots routed to its expert (scanning ids, kRowsPerPass at a time),
// then each warp streams its weight columns once for all those slots (8
// elements a lane a load: 16-byte loads of bf16 weights), so an
// expert's weights are read once per kRowsPerPass routed rows and experts no
// token chose are not read at all (their blocks exit after the scan).
// Prefill-sized groups want the tensor-core grouped GEMM instead (not here).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common.cuh"
#endif

namespace kiln {
namespace kernels {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(KILN_CUDA_EMULATION)

// Config: using X, W, Out; kHidden, kExperts, kTopK, kThreads; kNormalize.
template <class Config>
__device__ __forceinline__ void moe_router(const MoeRouteParams& p) {
  using X = typename Config::X;
  using W = typename Config::W;
  using Out = typename Config::Out;
  constexpr int H = Config::kHidden, E = Config::kExperts, K = Config::kTopK;
  constexpr int kWarps = Config::kThreads / 32;
  static_assert(K >= 1 && K <= E && E <= 1024, "top-k of at most 1024 experts");
  constexpr int kSmemBytes = E * 4;
#if defined(KILN_CUDA_EMULATION)
  unsigned char* const smem = emulated_shared_memory(kSmemBytes);
#else
  __shared__ __align__(16) unsigned char smem[kSmemBytes];
#endif
  float* logits = reinterpret_cast<float*>(smem);
  const int t = blockIdx.x;
  wait_for_previous_kernel();
  if (t >= p.rows) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const X* x = static_cast<const X*>(p.x) + (long long)t * H;
  for (int e = warp; e < E; e += kWarps) {
    const W* row = static_cast<const W*>(p.w) + (long long)e * H;
    float s = 0.0f;
    for (int i = lane; i < H; i += 32) s += to_float(x[i]) * to_float(row[i]);
    s = warp_sum(s);
    if (lane == 0) logits[e] = round_to<Out>(s);
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  float peak = logits[0];
  for (int e = 1; e < E; ++e) peak = logits[e] > peak ? logits[e] : peak;
  float sum = 0.0f;
  for (int e = 0; e < E; ++e) sum += expf(logits[e] - peak);
  float kept[K];
  int chosen[K];
  float kept_sum = 0.0f;
  for (int k = 0; k < K; ++k) {
    int best = -1;
    for (int e = 0; e < E; ++e)
      if (logits[e] != neg_inf() && (best < 0 || logits[e] > logits[best])) best = e;
    kept[k] = expf(logits[best] - peak) / sum;
    chosen[k] = best;
    kept_sum += kept[k];
    logits[best] = neg_inf();
  }
  Out* weights = static_cast<Out*>(p.weights) + (long long)t * K;
  for (int k = 0; k < K; ++k) {
    weights[k] = from_float<Out>(Config::kNormalize ? kept[k] / kept_sum : kept[k]);
    p.ids[(long long)t * K + k] = chosen[k];
  }
}

// The next up to kRowsPerPass slots routed to `expert` from slot `*next`
// on, into slots[]; returns how many (0: none left). Thread 0 scans; every
// thread of the block must call it.
template <int kRowsPerPass>
__device__ __forceinline__ int moe_gather_slots(const int* ids, int routed, int expert, int* slots, int* shared_next,
                                                int* shared_count) {
  __syncthreads();
  if (threadIdx.x == 0) {
    int n = 0, s = *shared_next;
    for (; s < routed && n < kRowsPerPass; ++s)
      if (ids[s] == expert) slots[n++] = s;
    *shared_next = s;
    *shared_count = n;
  }
  __syncthreads();
  return *shared_count;
}

// Config: using X, W; kHidden, kFfn, kExperts, kTopK, kRowsPerPass, kThreads.
// Grid [E, ceil(F / warps)]: each warp one ffn column of its block's tile.
template <class Config>
__device__ __forceinline__ void moe_gate_up(const MoeExpertsParams& p) {
  using X = typename Config::X;
  using W = typename Config::W;
  constexpr int H = Config::kHidden, F = Config::kFfn, K = Config::kTopK, R = Config::kRowsPerPass;
  constexpr int kWarps = Config::kThreads / 32;
  static_assert(H % 8 == 0, "rows of whole 8-element vectors");
  constexpr int kSmemBytes = (R + 2) * 4;
#if defined(KILN_CUDA_EMULATION)
  unsigned char* const smem = emulated_shared_memory(kSmemBytes);
#else
  __shared__ __align__(16) unsigned char smem[kSmemBytes];
#endif
  int* slots = reinterpret_cast<int*>(smem);
  int* next = slots + R;
  const int expert = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = blockIdx.y * kWarps + warp;
  wait_for_previous_kernel();
  if (threadIdx.x == 0) *next = 0;
  const W* wg = static_cast<const W*>(p.gate) + ((long long)expert * F + col) * H;
  const W* wu = static_cast<const W*>(p.up) + ((long long)expert * F + col) * H;
  const X* x = static_cast<const X*>(p.x);
  for (;;) {
    const int n = moe_gather_slots<R>(p.ids, p.rows * K, expert, slots, next, next + 1);
    if (n == 0) return;
    if (col >= F) continue;
    float g[R], u[R];
#pragma unroll
    for (int r = 0; r < R; ++r) g[r] = u[r] = 0.0f;
    for (int i = lane * 8; i < H; i += 32 * 8) {
      float a[8], b[8];
      load8_nc(wg + i, a);
      load8_nc(wu + i, b);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < n) {
          float v[8];
          load8(x + (long long)(slots[r] / K) * H + i, v);
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            g[r] += a[j] * v[j];
            u[r] += b[j] * v[j];
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < n) {
        const float gs = warp_sum(g[r]), us = warp_sum(u[r]);
        // rounded as the activation type would hold it between the GEMMs
        if (lane == 0) p.act[(long long)slots[r] * F + col] = round_to<X>(silu(round_to<X>(gs)) * round_to<X>(us));
      }
    }
  }
}

// Config: using X, W, Out; kHidden, kFfn, kExperts, kTopK, kRowsPerPass, kThreads.
// Grid [E, ceil(H / warps)].
template <class Config>
__device__ __forceinline__ void moe_down(const MoeExpertsParams& p) {
  using W = typename Config::W;
  using Out = typename Config::Out;
  constexpr int H = Config::kHidden, F = Config::kFfn, K = Config::kTopK, R = Config::kRowsPerPass;
  constexpr int kWarps = Config::kThreads / 32;
  static_assert(F % 8 == 0, "rows of whole 8-element vectors");
  constexpr int kSmemBytes = (R + 2) * 4;
#if defined(KILN_CUDA_EMULATION)
  unsigned char* const smem = emulated_shared_memory(kSmemBytes);
#else
  __shared__ __align__(16) unsigned char smem[kSmemBytes];
#endif
  int* slots = reinterpret_cast<int*>(smem);
  int* next = slots + R;
  const int expert = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = blockIdx.y * kWarps + warp;
  wait_for_previous_kernel();
  if (threadIdx.x == 0) *next = 0;
  const W* wd = static_cast<const W*>(p.down) + ((long long)expert * H + col) * F;
  const Out* weights = static_cast<const Out*>(p.weights);
  for (;;) {
    const int n = moe_gather_slots<R>(p.ids, p.rows * K, expert, slots, next, next + 1);
    if (n == 0) return;
    if (col >= H) continue;
    float d[R];
#pragma unroll
    for (int r = 0; r < R; ++r) d[r] = 0.0f;
    for (int i = lane * 8; i < F; i += 32 * 8) {
      float a[8];
      load8_nc(wd + i, a);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < n) {
          float v[8];
          load8(p.act + (long long)slots[r] * F + i, v);
#pragma unroll
          for (int j = 0; j < 8; ++j) d[r] += a[j] * v[j];
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < n) {
        const float sum = warp_sum(d[r]);
        if (lane == 0) p.partial[(long long)slots[r] * H + col] = to_float(weights[slots[r]]) * round_to<Out>(sum);
      }
    }
  }
}

// Config: using Out; kHidden, kTopK, kThreads. Grid [rows].
template <class Config>
__device__ __forceinline__ void moe_combine(const MoeExpertsParams& p) {
  using Out = typename Config::Out;
  constexpr int H = Config::kHidden, K = Config::kTopK;
  const int t = blockIdx.x;
  wait_for_previous_kernel();
  if (t >= p.rows) return;
  Out* out = static_cast<Out*>(p.out) + (long long)t * H;
  for (int j = threadIdx.x; j < H; j += Config::kThreads) {
    float s = 0.0f;
    for (int k = 0; k < K; ++k) s += p.partial[((long long)t * K + k) * H + j];
    out[j] = from_float<Out>(s);
  }
}

#endif  // __CUDACC__ || __CUDACC_RTC__ || KILN_CUDA_EMULATION

}  // namespace kernels
}  // namespace kiln
