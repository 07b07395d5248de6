// Skinny GEMM for decode-shaped batches: y = x · Wᵀ (+ bias) with few rows.
// Memory-bound on W, so the kernel is built to stream W at HBM speed:
// 16-byte loads through the read-only path (evict-first in L2), kUnroll
// loads in flight per lane before any math, each weight row split over
// kSplitK warps (split-K inside the block, reduced through shared memory in
// a fixed order, so the result does not depend on the batch size or timing:
// no atomics). The first weight loads are issued before waiting on the
// previous kernel (see wait_for_previous_kernel in common.cuh).
//
//   x [rows, K] bf16, W [N, K] (Config::Weight), bias [N], y [rows, N] bf16
//
// W is f32, bf16 or f16 rows (block-quantized weights run gemm_quant.cuh,
// which shares the epilogue below).
//
// With kSiluMul (SwiGLU's gate/up projection, W = [gate; up] with N = 2F),
// y [rows, F] = silu(x · gateᵀ) · (x · upᵀ) straight from the f32 sums: a
// block's first half of rows are gate rows j.., its second half the up rows
// F + j.., so the silu_mul kernel and the gate/up round trip through memory
// go away.
//
// With kRope (the qkv projection of a merged-QKV model, W = [q; k; v] rows
// of (H + 2 Hkv) heads), the epilogue is rope_kv_append's: a block's row
// slots pair up the two columns one rotation turns (rope_pair_columns), and
// the roped q goes to y [rows, H D] while the roped k and the v go to the
// KV pools (GemvRopeParams), so the rope_kv_append launch goes away. The
// rotation takes the f32 sums, where the unfused path rounds them to bf16
// first.
//
// Block: 8 warps, kRowsPerBlock weight rows; it handles up to kMaxRows
// rows of x (grid.z walks further groups of kMaxRows rows).
// Grid [ceil(N / kRowsPerBlock), 1, ceil(rows / kMaxRows)], block [32 kRowsPerBlock kSplitK].
// The kernel body also compiles on the host under KILN_CUDA_EMULATION, where
// test/gpu/cuda_emulation.h supplies the intrinsics and runs each CUDA
// thread as a fiber (test/gpu/gemv_emulation_test.cc).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common.cuh"
#endif
#include "quant_blocks.cuh"    // IsPacked: gemm_quant.cuh's bias type
#include "rope_kv_append.cuh"  // the rope epilogue

namespace kiln {
namespace kernels {

// A gemm's bias type: its weight's, bf16 for packed block weights.
template <class W, bool kPacked = IsPacked<W>::value> struct GemvBias { using type = W; };
template <class W> struct GemvBias<W, true> { using type = bf16; };

// Elements v·8 .. v·8 + 7 of weight row `row` as f32, under L2 `policy`.
template <class Config>
__device__ __forceinline__ void load8_weight(const void* w, long long row, int v, float (&out)[8],
                                             unsigned long long policy) {
  using W = typename Config::Weight;
  static_assert(!IsPacked<W>::value, "packed block weights run gemm_quant.cuh");
  load8_stream(static_cast<const W*>(w) + row * Config::kK + v * 8, out, policy);
}

__device__ __forceinline__ const GemvParams& gemv_args(const GemvParams& p) { return p; }
__device__ __forceinline__ const GemvParams& gemv_args(const GemvRopeParams& p) { return p.gemv; }

// The weight row of row slot `slot` of tile `tile` (a gemv block's
// blockIdx.x, a gemv_stream block's current tile), or -1 past the matrix.
// Paired (SwiGLU, rope): slots s and s + kRowsPerBlock / 2 hold pair
// j = tile * kRowsPerBlock / 2 + s.
template <class Config>
__device__ __forceinline__ int gemv_weight_row(int tile, int slot) {
  constexpr bool kPaired = Config::kSiluMul || Config::kRope;
  constexpr int kHalf = Config::kRowsPerBlock / 2, kF = Config::kN / 2;
  if (!kPaired) {
    const int n = tile * Config::kRowsPerBlock + slot;
    return n < Config::kN ? n : -1;
  }
  const int j = tile * kHalf + slot % kHalf;
  if (j >= kF) return -1;
  if constexpr (Config::kRope) {
    int lo, hi;
    rope_pair_columns<Config>(j, lo, hi);
    return slot < kHalf ? lo : hi;
  }
  return slot < kHalf ? j : kF + j;
}

// What the rope epilogue's thread needs besides the sums: thread i takes
// pair slot i / kMaxRows of x row i % kMaxRows (one pass: kRowsPerBlock / 2
// * kMaxRows <= 256 threads), its angle and its KV slot.
struct GemvRopeLane {
  bool active = false;
  int pair_slot = 0, m = 0, kv_slot = -1;
  float sin = 0.0f, cos = 1.0f;
};
// Thread threadIdx.x's lane for x row m0 + m at `position` with KV slot
// `kv_slot` (the caller has loaded them).
template <class Config>
__device__ __forceinline__ GemvRopeLane gemv_rope_lane_at(int tile, int m_count, int position, int kv_slot) {
  GemvRopeLane lane;
  if constexpr (Config::kRope) {
    constexpr int kM = Config::kMaxRows, kHalf = Config::kRowsPerBlock / 2;
    static_assert(kHalf * kM <= 256, "one pass of the rope epilogue");
    lane.pair_slot = threadIdx.x / kM;
    lane.m = threadIdx.x % kM;
    lane.active = lane.pair_slot < kHalf && lane.m < m_count && gemv_weight_row<Config>(tile, lane.pair_slot) >= 0;
    if (lane.active) {
      int lo, hi;
      const int pair = rope_pair_columns<Config>(tile * kHalf + lane.pair_slot, lo, hi);
      lane.kv_slot = kv_slot;
      if (lo / Config::kHeadDim < Config::kHeads + Config::kKvHeads)
        sincosf((float)position * rope_inv_freq<Config>(pair), &lane.sin, &lane.cos);
    }
  }
  return lane;
}
template <class Config, class Params>
__device__ __forceinline__ GemvRopeLane gemv_rope_lane(const Params& params, int tile, int m0, int m_count) {
  if constexpr (Config::kRope) {
    const int m = threadIdx.x % Config::kMaxRows;
    if (m < m_count)
      return gemv_rope_lane_at<Config>(tile, m_count, params.positions[m0 + m], params.slot_mapping[m0 + m]);
  }
  return GemvRopeLane{};
}

// The end of a tile: the sums of its row slots from the warps' partials
// (partial[slot * kSplit + s][m], split s), plus bias, through the plain,
// SwiGLU or rope epilogue into y (and the KV pools). Threads 0..255 take
// part; the caller has made the partials visible to them.
template <class Config, int kSplit, class Params>
__device__ __forceinline__ void gemv_epilogue(const Params& params, int tile, int m0, int m_count,
                                              const float (*partial)[Config::kMaxRows], const GemvRopeLane& rope) {
  const GemvParams& p = gemv_args(params);
  using Bias = typename GemvBias<typename Config::Weight>::type;
  constexpr int kM = Config::kMaxRows, kHalf = Config::kRowsPerBlock / 2, kF = Config::kN / 2, kThreads = 256;
  auto weight_row = [&](int slot) { return gemv_weight_row<Config>(tile, slot); };
  // The sum of row slot `slot` for x row m (plus its bias).
  auto row_sum = [&](int slot, int m) {
    float sum = 0.0f;
    for (int s = 0; s < kSplit; ++s) sum += partial[slot * kSplit + s][m];
    if (Config::kBias) sum += to_float(static_cast<const Bias*>(p.bias)[weight_row(slot)]);
    return sum;
  };
  if constexpr (Config::kRope) {
    constexpr int D = Config::kHeadDim, H = Config::kHeads, Hkv = Config::kKvHeads;
    using Kv = typename Config::Kv;
    if (!rope.active) return;
    const int slot = rope.pair_slot, m = rope.m;  // columns weight_row(slot), weight_row(slot + kHalf)
    const bool write_kv = rope.kv_slot >= 0 && (long long)rope.kv_slot < params.num_slots;
    const long long kv_base = (long long)rope.kv_slot * Hkv * D;
    store_rope_pair<Config>(static_cast<bf16*>(p.y) + (long long)(m0 + m) * H * D,
                            write_kv ? static_cast<Kv*>(params.k_pool) + kv_base : nullptr,
                            write_kv ? static_cast<Kv*>(params.v_pool) + kv_base : nullptr, weight_row(slot),
                            weight_row(slot + kHalf), row_sum(slot, m), row_sum(slot + kHalf, m), rope.sin, rope.cos);
    return;
  }
  if (Config::kSiluMul) {
    for (int i = threadIdx.x; i < kHalf * kM; i += kThreads) {
      const int slot = i / kM, m = i % kM;
      if (weight_row(slot) < 0 || m >= m_count) continue;
      const float gate = row_sum(slot, m), up = row_sum(slot + kHalf, m);
      const float y = silu(gate) * up;
      static_cast<bf16*>(p.y)[(long long)(m0 + m) * kF + tile * kHalf + slot] = from_float<bf16>(y);
    }
    return;
  }
  for (int i = threadIdx.x; i < Config::kRowsPerBlock * kM; i += kThreads) {
    const int slot = i / kM, m = i % kM;
    const int row_n = weight_row(slot);
    if (row_n < 0 || m >= m_count) continue;
    static_cast<bf16*>(p.y)[(long long)(m0 + m) * Config::kN + row_n] = from_float<bf16>(row_sum(slot, m));
  }
}

// Config: using Weight; static constexpr int kN, kK, kMaxRows, kRowsPerWarp, kRowsPerBlock,
//         kSplitK, kUnroll; static constexpr bool kBias, kSiluMul, kRope (and
//         with kRope, rope_kv_append's Config members); Params: GemvParams,
//         or GemvRopeParams with kRope.
// A warp streams kRowsPerWarp weight rows at once (kRowsPerWarp * kUnroll
// 16-byte loads in flight per lane); the block's 8 warps are 8 / kSplitK row
// groups times kSplitK slices of K, so kRowsPerBlock = 8 / kSplitK * kRowsPerWarp.
template <class Config, class Params>
__device__ __forceinline__ void gemv(const Params& params) {
  const GemvParams& p = gemv_args(params);
  constexpr int kK = Config::kK, kM = Config::kMaxRows, kSplit = Config::kSplitK;
  constexpr int kUnroll = Config::kUnroll, kR = Config::kRowsPerWarp;
  constexpr int kVecs = kK / 8;                    // 8-element vectors per row
  constexpr int kStride = 32 * kSplit;             // vectors between a lane's steps
  static_assert(kK % 8 == 0, "K is a multiple of 8");
  static_assert(Config::kRowsPerBlock == 8 / kSplit * kR, "8 warps per block");
  constexpr bool kPaired = Config::kSiluMul || Config::kRope;
  static_assert(!(Config::kSiluMul && Config::kRope), "one epilogue");
  static_assert(!kPaired || (Config::kRowsPerBlock % 2 == 0 && Config::kN % 2 == 0),
                "gate and up rows (or rope's column pairs) pair up within a block");
#if defined(KILN_CUDA_EMULATION)
  using Partials = float[Config::kRowsPerBlock * kSplit][kM];
  Partials& partial = *reinterpret_cast<Partials*>(emulated_shared_memory(int(sizeof(Partials))));
#else
  __shared__ float partial[Config::kRowsPerBlock * kSplit][kM];
#endif

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / kSplit, split = warp % kSplit;
  auto weight_row = [&](int slot) { return gemv_weight_row<Config>(blockIdx.x, slot); };
  const int m0 = blockIdx.z * kM;
  const int m_count = min(kM, p.rows - m0);
  const bf16* x = static_cast<const bf16*>(p.x) + (long long)m0 * kK;

  float acc[kR][kM];
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int m = 0; m < kM; ++m) acc[r][m] = 0.0f;
  int w_row[kR];  // this warp's weight rows (-1: past the matrix)
#pragma unroll
  for (int r = 0; r < kR; ++r) w_row[r] = weight_row(group * kR + r);
  float wv[kUnroll][kR][8];
  // One grid of x rows reads each weight byte once: evict-first keeps the
  // stream from pushing the activations and KV pages out of L2 (common.cuh).
  // Further grids (grid.z > 1) read W again, so they keep the normal policy.
  const unsigned long long w_policy = gridDim.z == 1 ? l2_policy_evict_first() : l2_policy_evict_normal();
  // All kUnroll * kR loads of a step in flight before any math.
  auto load_weights = [&](int v0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + u * kStride;
#pragma unroll
      for (int r = 0; r < kR; ++r)
        if (v < kVecs && w_row[r] >= 0) load8_weight<Config>(p.w, w_row[r], v, wv[u][r], w_policy);
    }
  };
  // The first step's weights are requested before waiting for the kernel
  // that writes x: weights never change, so their latency overlaps its tail.
  // (A bulk L2 prefetch of the block's whole rows there too measured slower.)
  load_weights(split * 32 + lane);
  wait_for_previous_kernel();
  allow_next_kernel();
  // The rope epilogue's position, slot and angle are fetched now, while the
  // weights stream, not at the block's end, where a round trip to memory
  // would hold every block of the grid back.
  const GemvRopeLane rope = gemv_rope_lane<Config>(params, blockIdx.x, m0, m_count);
  for (int v0 = split * 32 + lane; v0 < kVecs; v0 += kStride * kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = v0 + u * kStride;
      if (v >= kVecs) break;
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        if (m >= m_count) break;
        float xv[8];
        load8(x + (long long)m * kK + v * 8, xv);
#pragma unroll
        for (int r = 0; r < kR; ++r)
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r][m] += wv[u][r][e] * xv[e];
      }
    }
    if (v0 + kStride * kUnroll < kVecs) load_weights(v0 + kStride * kUnroll);
  }
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const float s = warp_sum(acc[r][m]);
      if (lane == 0) partial[(group * kR + r) * kSplit + split][m] = s;
    }
  __syncthreads();
  gemv_epilogue<Config, kSplit>(params, blockIdx.x, m0, m_count, partial, rope);
}

}  // namespace kernels
}  // namespace kiln
