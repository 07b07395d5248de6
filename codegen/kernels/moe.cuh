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
// gate_up and down run a grid [column tiles, chosen experts, row groups]
// (kernel_params.cuh): blockIdx.y names the y-th distinct expert the ids
// hold, so at one row only the k chosen experts get blocks, and each of
// their weight streams is spread over all SMs. A block finds its expert and
// its up to kRowsPerPass slots with block-wide prefix sums over the ids
// (a few hundred bytes from L2), then each warp streams its weight rows once
// for all those slots: 16-byte loads kept raw in registers, kUnroll · 2 of
// them in flight a lane (gate and up of a column together; down two hidden
// columns at once), the slots' rows of x from L1. Experts no token chose
// are not read at all, and a decode batch of up to kRowsPerPass rows reads
// each chosen expert once. Each output is one warp's sum in a fixed order
// (no atomics), whatever the batch.
// Batches with several slots an expert run moe_grouped_mma.cuh instead.
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

// The exclusive prefix sum of `v` over the block's threads in thread
// order; `total` gets the block's sum. scratch: kThreads / 32 ints of
// shared memory. Every thread of the block calls it.
template <int kThreads>
__device__ __forceinline__ int moe_block_exclusive_sum(int v, int* scratch, int& total) {
  constexpr int kWarps = kThreads / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int inclusive = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int before = __shfl_sync(0xffffffffu, inclusive, lane >= o ? lane - o : lane);
    if (lane >= o) inclusive += before;
  }
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  int earlier = 0;
  total = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const int c = scratch[w];
    earlier += w < warp ? c : 0;
    total += c;
  }
  __syncthreads();  // scratch is free for the next call
  return earlier + inclusive - v;
}

// Of the indices i in [0, n) with chosen(i), numbered 0, 1, .. in index
// order, those numbered first .. first + count - 1 go to out[number -
// first]; returns how many were chosen in all. kThreads indices a round,
// one a thread; every thread of the block calls it, and out is visible to
// all of them on return.
template <int kThreads, class Chosen>
__device__ __forceinline__ int moe_block_select(int n, Chosen chosen, int first, int count, int* out, int* scratch) {
  int base = 0;
  for (int c = 0; c < n; c += kThreads) {
    const int i = c + int(threadIdx.x);
    const int flag = i < n && chosen(i) ? 1 : 0;
    int total = 0;
    const int number = base + moe_block_exclusive_sum<kThreads>(flag, scratch, total);
    if (flag && number >= first && number < first + count) out[number - first] = i;
    base += total;
  }
  __syncthreads();
  return base;
}

// A block's share of the routing: its expert (the blockIdx.y-th distinct
// one the ids name, in id order) and its group of that expert's slots (the
// blockIdx.z-th kRowsPerPass, in slot order) into slots[]; returns how many
// slots (0: the block has nothing to do). Every thread calls it, after the
// wait on the router.
template <int kThreads, int E, int R>
__device__ __forceinline__ int moe_block_route(const int* ids, int routed, int* chosen, int* slots, int* expert,
                                               int* scratch) {
  for (int e = threadIdx.x; e < E; e += kThreads) chosen[e] = 0;
  __syncthreads();
  for (int s = threadIdx.x; s < routed; s += kThreads) {
    const int e = ids[s];
    if (e >= 0 && e < E) chosen[e] = 1;  // every writer stores the same 1
  }
  __syncthreads();
  const int distinct = moe_block_select<kThreads>(
      E, [chosen](int e) { return chosen[e] != 0; }, int(blockIdx.y), 1, expert, scratch);
  if (int(blockIdx.y) >= distinct) return 0;
  const int e = *expert;
  const int first = int(blockIdx.z) * R;
  const int total = moe_block_select<kThreads>(
      routed, [ids, e](int s) { return ids[s] == e; }, first, R, slots, scratch);
  const int n = total - first;
  return n < 0 ? 0 : n < R ? n : R;
}

// kVec consecutive elements of T as f32 (16 bytes of weights' worth).
template <int kVec, class T>
__device__ __forceinline__ void moe_load_x(const T* p, float (&out)[kVec]) {
  if constexpr (kVec == 8) {
    load8_nc(p, out);
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) out[i] = to_float(p[i]);
  }
}

// acc[r][m] += w[r] · x[rows[m]] over K elements, for m < n: a warp's
// kR weight rows against the block's n gathered rows of x [*, K]. Lane l
// takes the 16-byte weight vectors l, l + 32, ..; each of the kUnroll
// buffers of kR vectors is refilled with the vector kUnroll · 32 ahead as
// soon as it is used, so kUnroll · kR loads a lane stay in flight (raw, not
// yet widened to f32: half the registers for bf16). Each row of x is read
// once per 16-byte weight vector group (kR rows share it), from L1.
template <class W, class Xt, int K, int kR, int kM, int kUnroll>
__device__ __forceinline__ void moe_rows_dot(const W* const (&w)[kR], const Xt* x, const int* rows, int n,
                                             float (&acc)[kR][kM], unsigned long long policy) {
  constexpr int kVec = 16 / int(sizeof(W));
  constexpr int kVecs = K / kVec;
  static_assert(K % kVec == 0, "rows of whole 16-byte vectors");
  const int lane = threadIdx.x % 32;
  uint4 wv[kUnroll][kR];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int v = lane + u * 32;
#pragma unroll
    for (int r = 0; r < kR; ++r)
      if (v < kVecs) wv[u][r] = load_u128_stream(w[r] + v * kVec, policy);
  }
  for (int v0 = lane; v0 < kVecs; v0 += kUnroll * 32) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + u * 32;
      if (v >= kVecs) break;
      float wf[kR][kVec];
#pragma unroll
      for (int r = 0; r < kR; ++r) {
#if defined(KILN_CUDA_EMULATION)
        W e[kVec];  // the host compiler's aliasing rules: copy, not a W view of the uint4
        memcpy(e, &wv[u][r], 16);
#else
        const W* e = reinterpret_cast<const W*>(&wv[u][r]);
#endif
#pragma unroll
        for (int j = 0; j < kVec; ++j) wf[r][j] = to_float(e[j]);
      }
      const int ahead = v + kUnroll * 32;
      if (ahead < kVecs) {
#pragma unroll
        for (int r = 0; r < kR; ++r) wv[u][r] = load_u128_stream(w[r] + ahead * kVec, policy);
      }
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        if (m >= n) break;
        float xv[kVec];
        moe_load_x<kVec>(x + (long long)rows[m] * K + v * kVec, xv);
#pragma unroll
        for (int r = 0; r < kR; ++r)
#pragma unroll
          for (int j = 0; j < kVec; ++j) acc[r][m] = fmaf(wf[r][j], xv[j], acc[r][m]);
      }
    }
  }
}

// The shared memory of moe_gate_up and moe_down: chosen [E], slots [R],
// the slots' rows of x [R], the block's expert, the scan's warp sums.
template <int E, int R, int kThreads>
struct MoeRouteLayout {
  static constexpr int kChosen = 0, kSlots = E, kRows = E + R, kExpert = E + 2 * R, kScratch = kExpert + 1;
  static constexpr int kBytes = (kScratch + kThreads / 32) * 4;
};

// What moe_gate_up and moe_down share before their weight streams: the
// block's expert and up to kRowsPerPass slots (moe_block_route) in its
// shared memory (MoeRouteLayout), and the L2 policy of the stream: one grid
// of row groups reads each weight byte once (evict-first); more groups read
// the expert again, so they keep it. n 0: the block has nothing to do.
struct MoeBlockWork {
  int n, expert;
  int* slots;
  int* rows;  // scratch for the slots' rows of x (moe_gate_up)
  unsigned long long policy;
};
template <class Config>
__device__ __forceinline__ MoeBlockWork moe_block_work(const MoeExpertsParams& p) {
  constexpr int E = Config::kExperts, R = Config::kRowsPerPass, kThreads = Config::kThreads;
  static_assert(kThreads / 32 * 2 == kMoeColumnsPerBlock, "two columns a warp");
  using Layout = MoeRouteLayout<E, R, kThreads>;
#if defined(KILN_CUDA_EMULATION)
  int* const ints = reinterpret_cast<int*>(emulated_shared_memory(Layout::kBytes));
#else
  __shared__ __align__(16) int ints[Layout::kBytes / 4];
#endif
  wait_for_previous_kernel();
  const int n = moe_block_route<kThreads, E, R>(p.ids, p.rows * Config::kTopK, ints + Layout::kChosen,
                                                ints + Layout::kSlots, ints + Layout::kExpert, ints + Layout::kScratch);
  const unsigned long long policy = gridDim.z == 1 ? l2_policy_evict_first() : l2_policy_evict_normal();
  return {n, n == 0 ? -1 : ints[Layout::kExpert], ints + Layout::kSlots, ints + Layout::kRows, policy};
}

// A warp's two weight rows w[0], w[1] (each K long) against the block's n
// gathered rows of x [*, K] (moe_rows_dot); emit(m, w[0] · x[rows[m]],
// w[1] · x[rows[m]]) on lane 0 for each m < n.
template <class W, class Xt, int K, int R, class Emit>
__device__ __forceinline__ void moe_two_rows(const W* const (&w)[2], const Xt* x, const int* rows, int n,
                                             unsigned long long policy, Emit emit) {
  float acc[2][R];
#pragma unroll
  for (int m = 0; m < R; ++m) acc[0][m] = acc[1][m] = 0.0f;
  // f32 weights widen 4 values a vector where bf16 widens 8: with as many
  // raw vectors in flight as bf16's, their f32 rows would spill past the
  // register cap, so they keep half.
  constexpr int kUnroll = sizeof(W) == 4 ? 2 : 4;
  moe_rows_dot<W, Xt, K, 2, R, kUnroll>(w, x, rows, n, acc, policy);
#pragma unroll
  for (int m = 0; m < R; ++m) {
    if (m >= n) break;
    const float s0 = warp_sum(acc[0][m]), s1 = warp_sum(acc[1][m]);
    if (threadIdx.x % 32 == 0) emit(m, s0, s1);
  }
}

// Config: using X, W; kHidden, kFfn, kExperts, kTopK, kRowsPerPass, kThreads.
// Grid (kernel_params.cuh): [ceil(F / (2 warps)), moeExpertGroups, ceil(rows
// / kRowsPerPass)]. Each warp computes two ffn columns in turn, the gate and
// up rows of a column streamed together (one pass over both) against all of
// the block's slots, so an expert's gate and up are read once for up to
// kRowsPerPass routed rows.
template <class Config>
__device__ __forceinline__ void moe_gate_up(const MoeExpertsParams& p) {
  using X = typename Config::X;
  using W = typename Config::W;
  constexpr int H = Config::kHidden, F = Config::kFfn, K = Config::kTopK;
  constexpr int R = Config::kRowsPerPass, kWarps = Config::kThreads / 32;
  const MoeBlockWork b = moe_block_work<Config>(p);
  if (b.n == 0) return;
  for (int m = threadIdx.x; m < b.n; m += Config::kThreads) b.rows[m] = b.slots[m] / K;  // the slot's token
  __syncthreads();
  const int warp = threadIdx.x / 32;
  const X* x = static_cast<const X*>(p.x);
#pragma unroll 1
  for (int c = 0; c < 2; ++c) {
    const int col = int(blockIdx.x) * kMoeColumnsPerBlock + c * kWarps + warp;
    if (col >= F) break;
    const long long row = (long long)b.expert * F + col;
    const W* const w[2] = {static_cast<const W*>(p.gate) + row * H, static_cast<const W*>(p.up) + row * H};
    // By value: a reference capture would put `b` in local memory.
    moe_two_rows<W, X, H, R>(w, x, b.rows, b.n, b.policy, [act = p.act, slots = b.slots, col](int m, float gs, float us) {
      // rounded as the activation type would hold it between the GEMMs
      act[(long long)slots[m] * F + col] = round_to<X>(silu(round_to<X>(gs)) * round_to<X>(us));
    });
  }
}

// Config: using X, W, Out; kHidden, kFfn, kExperts, kTopK, kRowsPerPass, kThreads.
// Grid: [ceil(H / (2 warps)), moeExpertGroups, ceil(rows / kRowsPerPass)].
// Each warp streams two hidden columns' down rows at once against the
// block's slots' activations.
template <class Config>
__device__ __forceinline__ void moe_down(const MoeExpertsParams& p) {
  using W = typename Config::W;
  using Out = typename Config::Out;
  constexpr int H = Config::kHidden, F = Config::kFfn;
  constexpr int R = Config::kRowsPerPass, kWarps = Config::kThreads / 32;
  const MoeBlockWork b = moe_block_work<Config>(p);
  if (b.n == 0) return;
  const int col0 = int(blockIdx.x) * kMoeColumnsPerBlock + threadIdx.x / 32, col1 = col0 + kWarps;
  if (col0 >= H) return;
  // A column past H streams col0's row again; its sums are not written.
  const W* const down = static_cast<const W*>(p.down) + (long long)b.expert * H * F;
  const W* const w[2] = {down + (long long)col0 * F, down + (long long)(col1 < H ? col1 : col0) * F};
  const Out* weights = static_cast<const Out*>(p.weights);
  moe_two_rows<W, float, F, R>(w, p.act, b.slots, b.n, b.policy,
                               [partial = p.partial, slots = b.slots, weights, col0, col1](int m, float s0, float s1) {
                                 const int slot = slots[m];
                                 const float weight = to_float(weights[slot]);
                                 partial[(long long)slot * H + col0] = weight * round_to<Out>(s0);
                                 if (col1 < H) partial[(long long)slot * H + col1] = weight * round_to<Out>(s1);
                               });
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
