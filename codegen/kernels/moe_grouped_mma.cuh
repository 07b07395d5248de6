// The routed SwiGLU experts as grouped GEMMs on the tensor cores (bf16
// mma.sync m16n8k16, f32 accumulation), for batches that route more than
// a couple of tokens to an expert (prefill, large decode batches); moe.cuh's
// gathered GEMVs serve the smaller ones. Same params, scratch and combine
// as moe.cuh (MoeExpertsParams), same roundings:
//
//   moe_gate_up_mma: act [slot, F] (bf16) = silu(gate[e] x[t]) · up[e] x[t]
//   moe_down_mma:    partial [slot, H] (f32) = weights[slot] · down[e] act[slot]
//
// for slot = t · top_k + k routed to e = ids[slot]; moe_combine sums each
// token's slots. Each block computes one tile of output columns (the weight
// rows: the mma's m) for one tile of one expert's slots (the mma's n):
// grid [column tiles, slot tiles], blockIdx.y the y-th tile of the experts'
// slot lists laid end to end, expert 0 first. The lists are the routing's
// own: every block counts the slots per expert (shared-memory atomics) and
// takes its tile's slots, in slot order, with moe.cuh's block select over
// the ids; blocks past the last tile return. No expert gets a block for a
// slot it was not routed, and an expert with no slot is never read.
//
// Tiles (moe_mma::Tile): 8 warps. Up to 16 slots an expert on average
// (decode), a tile is 16 slots, so one pass streams the expert's weights
// once for up to 16 slots: for gate/up each warp takes 16 output columns
// and the matching 16 up rows (128 columns a block), for down 16 columns
// and 8 of the slots (warps 4 x 2, 64 columns a block: twice the blocks of
// a 128-column tile, so the last wave over the SMs is a smaller share);
// past that, 128 slots by 64 (gate/up, 128 weight rows) or 128 (down)
// columns, warps 2 x 4. Operands pass
// through shared memory by 16-byte cp.async (weights and gathered rows of
// x or act, slots past the tile's count as zeros) in kStages stages of K
// steps of 64, swizzled as tensor_core.cuh's tiles, read by ldmatrix: the
// weights as the A operand ([rows, K] row-major), the slots' rows as the
// B operand, as attention's K in S = Q Kᵀ. Each output element is one
// slot's dot product in a fixed order, whatever else shares the tile.
//
// Dynamic shared memory: moe_mma::smem_bytes(experts); the kernel body
// also compiles on the host under KILN_CUDA_EMULATION
// (test/gpu/moe_grouped_mma_emulation_test.cc).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common.cuh"
#endif
#include "kernel_params.cuh"
#include "moe.cuh"          // moe_block_exclusive_sum, moe_block_select
#include "tensor_core.cuh"  // tile_offset, ldmatrix addressing, mma_bf16

namespace kiln {
namespace kernels {
namespace moe_mma {

constexpr int kBlockK = 64;  // K step: one 128-byte swizzled row of bf16
constexpr int kThreads = 256;
constexpr int kStages = 3;
// Average slots an expert above which the 128-slot tiles run.
constexpr int kNarrowMaxAverage = 16;

// A block's tile of one part (gate/up or down) at one width (narrow: 16 slots).
template <bool kGateUp, bool kWide>
struct Tile {
  static constexpr int kWarpsM = kWide ? 2 : kGateUp ? 8 : 4, kWarpsN = kWide ? 4 : kGateUp ? 1 : 2;
  static constexpr int kMTiles = kWide ? (kGateUp ? 2 : 4) : 1;  // m16 tiles of output columns a warp
  static constexpr int kNTiles = kWide ? 4 : kGateUp ? 2 : 1;     // n8 tiles of slots a warp
  static constexpr int kColumns = kWarpsM * kMTiles * 16;         // output columns a block
  static constexpr int kWeightRows = (kGateUp ? 2 : 1) * kColumns;  // gate rows, then up rows
  static constexpr int kSlots = kWarpsN * kNTiles * 8;
  static constexpr int kStageBytes = (kWeightRows + kSlots) * kBlockK * 2;
  static_assert(kWarpsM * kWarpsN * 32 == kThreads, "8 warps");
  static_assert(kNTiles == 1 || kNTiles % 2 == 0,
                "slot fragments by pairs of n8 tiles, or one n8 tile two K steps at a time (ldmatrix.x4)");
};

// Average slots an expert from which the compiler picks these kernels over
// moe.cuh's gathered GEMVs (kernel_selection.cc), as the rows of a batch.
constexpr int kMinAverage = 2;
KILN_HOST_DEVICE constexpr int min_rows(int experts, int top_k) {
  return (kMinAverage * experts + top_k - 1) / top_k;
}
KILN_HOST_DEVICE constexpr bool wide(int rows, int top_k, int experts) {
  return (long long)rows * top_k > (long long)kNarrowMaxAverage * experts;
}
KILN_HOST_DEVICE constexpr int max_stage_bytes() {
  return Tile<true, false>::kStageBytes > Tile<true, true>::kStageBytes ? Tile<true, false>::kStageBytes
                                                                        : Tile<true, true>::kStageBytes;
}
// The routing's ints after the stages: per expert its slot count and first
// tile [E + 1], the tile's slots [128], the block's expert, the scan's warp sums.
KILN_HOST_DEVICE constexpr int route_ints(int experts) { return 2 * experts + 1 + 128 + 1 + kThreads / 32; }
KILN_HOST_DEVICE constexpr int smem_bytes(int experts) {
  return kStages * max_stage_bytes() + (route_ints(experts) * 4 + 15) / 16 * 16;
}

// Tiles of `tile` slots the experts' lists can take, at most: each expert
// with a slot rounds its count up once.
KILN_HOST_DEVICE constexpr int slot_tiles(int rows, int top_k, int experts, int tile) {
  const long long slots = (long long)rows * top_k;
  const long long used = slots < experts ? slots : experts;
  const long long tiles = (slots + used * (tile - 1)) / tile;
  return tiles < 1 ? 1 : int(tiles);
}

// The launch of either part for `rows` tokens: grid [x, y, 1], block [kThreads].
struct Grid {
  unsigned x = 1, y = 1;
};
KILN_HOST_DEVICE constexpr Grid grid(bool gate_up, int rows, int top_k, int experts, int hidden, int ffn) {
  const bool w = wide(rows, top_k, experts);
  const int columns = gate_up ? ffn : hidden;
  const int per_block = gate_up ? (w ? Tile<true, true>::kColumns : Tile<true, false>::kColumns)
                                : (w ? Tile<false, true>::kColumns : Tile<false, false>::kColumns);
  const int slots = w ? Tile<true, true>::kSlots : Tile<true, false>::kSlots;
  return Grid{unsigned((columns + per_block - 1) / per_block), unsigned(slot_tiles(rows, top_k, experts, slots))};
}

}  // namespace moe_mma
}  // namespace kernels
}  // namespace kiln

#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(KILN_CUDA_EMULATION)

namespace kiln {
namespace kernels {

// The block's share of the routing for tiles of kSlots: its expert and its
// tile's slots (in slot order) into slots[]; returns how many (0: the block
// is past the last tile). `ints`: moe_mma::route_ints(E) of shared memory.
// Every thread calls it, after the wait on the router.
template <int E, int kSlots>
__device__ __forceinline__ int moe_mma_route(const int* ids, int routed, int* ints, int*& slots) {
  constexpr int kThreads = moe_mma::kThreads;
  unsigned* count = reinterpret_cast<unsigned*>(ints);
  int* first_tile = ints + E;  // [E + 1]
  slots = ints + 2 * E + 1;
  int* expert = slots + 128;
  int* scratch = expert + 1;
  for (int e = threadIdx.x; e < E; e += kThreads) count[e] = 0u;
  __syncthreads();
  for (int s = threadIdx.x; s < routed; s += kThreads) {
    const int e = ids[s];
    if (e >= 0 && e < E) atomicAdd(count + e, 1u);
  }
  __syncthreads();
  int tiles = 0;
  for (int c = 0; c < E; c += kThreads) {
    const int e = c + int(threadIdx.x);
    const int mine = e < E ? int((count[e] + kSlots - 1) / kSlots) : 0;
    int total = 0;
    const int before = moe_block_exclusive_sum<kThreads>(mine, scratch, total);
    if (e < E) first_tile[e] = tiles + before;
    tiles += total;
  }
  if (int(blockIdx.y) >= tiles) return 0;  // the same for every thread
  for (int e = threadIdx.x; e < E; e += kThreads)
    if (int(blockIdx.y) >= first_tile[e] && int(blockIdx.y) < first_tile[e] + int((count[e] + kSlots - 1) / kSlots))
      *expert = e;
  __syncthreads();
  const int e = *expert;
  const int first = (int(blockIdx.y) - first_tile[e]) * kSlots;
  const int n = int(count[e]) - first;
  moe_block_select<kThreads>(routed, [ids, e](int s) { return ids[s] == e; }, first, kSlots, slots, scratch);
  return n < kSlots ? n : kSlots;
}

// One block's tile (see the top of the file). Config: using X (bf16), W
// (bf16), Out; kHidden, kFfn, kExperts, kTopK.
template <class Config, bool kGateUp, class T>
__device__ __forceinline__ void moe_mma_tile(const MoeExpertsParams& p) {
  using Out = typename Config::Out;
  constexpr int H = Config::kHidden, F = Config::kFfn, E = Config::kExperts, K = Config::kTopK;
  constexpr int kDepth = kGateUp ? H : F;        // the dot products' length
  constexpr int kColumnsAll = kGateUp ? F : H;   // output columns
  constexpr int kSteps = kDepth / moe_mma::kBlockK;
  constexpr int kStages = moe_mma::kStages, kThreads = moe_mma::kThreads;
  constexpr int kWeightBytes = T::kWeightRows * moe_mma::kBlockK * 2;
  static_assert(kDepth % moe_mma::kBlockK == 0, "hidden and ffn multiples of 64");

  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned base = smem_address(smem);
  int* const ints = reinterpret_cast<int*>(smem + kStages * moe_mma::max_stage_bytes());
  wait_for_previous_kernel();
  int* slots = nullptr;
  const int n = moe_mma_route<E, T::kSlots>(p.ids, p.rows * K, ints, slots);
  if (n == 0) return;
  const int expert = slots[128];  // moe_mma_route's expert, after the slots
  const int col0 = int(blockIdx.x) * T::kColumns;

  // Each thread copies 16-byte chunk tid % 8 of rows tid / 8 + 32 i of
  // both tiles: for the weights, of output column c0 + 32 i (minus the
  // columns, for the up rows after the gate rows).
  constexpr int kPassRows = kThreads / 8;
  static_assert(T::kColumns % kPassRows == 0 && (T::kSlots % kPassRows == 0 || T::kSlots < kPassRows),
                "whole passes of weight rows; slot rows in whole passes or one partial one");
  const int chunk = threadIdx.x % 8, r0 = threadIdx.x / 8;
  const int c0 = col0 + r0;
  const long long expert_at = (long long)expert * kColumnsAll * kDepth + (long long)c0 * kDepth + chunk * 8;
  const bf16* const first = static_cast<const bf16*>(kGateUp ? p.gate : p.down) + expert_at;
  const bf16* const second = static_cast<const bf16*>(p.up) + expert_at;  // gate/up only
  const bf16* const rows_of = (kGateUp ? static_cast<const bf16*>(p.x) : reinterpret_cast<const bf16*>(p.act)) +
                              chunk * 8;
  // K step `step` into stage `stage`: weight rows past the columns and slots
  // past n become zeros.
  auto load = [&](int step, int stage) {
    const unsigned w_dst = base + stage * T::kStageBytes, x_dst = w_dst + kWeightBytes;
    const int k0 = step * moe_mma::kBlockK;
#pragma unroll
    for (int i = 0; i < T::kWeightRows / kPassRows; ++i) {
      const bool up_row = kGateUp && i * kPassRows >= T::kColumns;
      const int offset = i * kPassRows - (up_row ? T::kColumns : 0);
      const bool real = c0 + offset < kColumnsAll;
      cp_async_16(w_dst + tile_offset(r0 + i * kPassRows, chunk, moe_mma::kBlockK),
                  (up_row ? second : first) + (real ? (long long)offset * kDepth + k0 : 0), real ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < (T::kSlots + kPassRows - 1) / kPassRows; ++i) {
      const int r = r0 + i * kPassRows;
      if (r >= T::kSlots) break;
      long long at = 0;
      if (r < n) at = (long long)(kGateUp ? slots[r] / K : slots[r]) * kDepth + k0;
      cp_async_16(x_dst + tile_offset(r, chunk, moe_mma::kBlockK), rows_of + at, r < n ? 16 : 0);
    }
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = warp / T::kWarpsN, warp_n = warp % T::kWarpsN;
  constexpr int kParts = kGateUp ? 2 : 1;
  // ldmatrix lane offsets at K step 0 of the warp's first A and B rows:
  // rows 16 apart keep the swizzle, and step ks of 16 columns XORs ks into
  // the chunk's bits 1-2 (tensor_core.cuh's chunk_step within a 128-byte row).
  constexpr int kRowBytes = moe_mma::kBlockK * 2;
  const unsigned a_lane = tile_offset(warp_m * T::kMTiles * 16 + ldsm_a_row(lane), ldsm_a_chunk(lane), moe_mma::kBlockK);
  // One n8 tile a warp: lane l points at slot l % 8, chunk l / 8, giving
  // b0, b1 of K step ks and b0, b1 of step ks + 1.
  const unsigned b_lane = T::kNTiles == 1
                              ? tile_offset(warp_n * 8 + lane % 8, lane / 8, moe_mma::kBlockK)
                              : tile_offset(warp_n * T::kNTiles * 8 + ldsm_k_row(lane), ldsm_k_chunk(lane),
                                            moe_mma::kBlockK);
  float acc[kParts][T::kMTiles][T::kNTiles][4];
#pragma unroll
  for (int g = 0; g < kParts; ++g)
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[g][mt][nt][i] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < kSteps) load(s, s);
    cp_async_commit();
  }
#pragma unroll 1
  for (int step = 0; step < kSteps; ++step) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // the step's stage has landed for all; the oldest stage is free
    if (step + kStages - 1 < kSteps) load(step + kStages - 1, (step + kStages - 1) % kStages);
    cp_async_commit();
    const unsigned w_tile = base + (step % kStages) * T::kStageBytes, x_tile = w_tile + kWeightBytes;
    unsigned pair[4];  // one n8 tile a warp: the B fragments of two K steps
#pragma unroll
    for (int ks = 0; ks < moe_mma::kBlockK / 16; ++ks) {
      unsigned a[kParts][T::kMTiles][4];
#pragma unroll
      for (int g = 0; g < kParts; ++g)
#pragma unroll
        for (int mt = 0; mt < T::kMTiles; ++mt)
          ldsm_x4(w_tile + (a_lane ^ (ks << 5)) + (g * T::kColumns + mt * 16) * kRowBytes, a[g][mt]);
      unsigned b[T::kNTiles][2];
      if constexpr (T::kNTiles == 1) {
        if (ks % 2 == 0) ldsm_x4(x_tile + (b_lane ^ (ks << 5)), pair);
        b[0][0] = pair[2 * (ks % 2)];
        b[0][1] = pair[2 * (ks % 2) + 1];
      } else {
#pragma unroll
        for (int np = 0; np < T::kNTiles / 2; ++np) {
          unsigned r[4];
          ldsm_x4(x_tile + (b_lane ^ (ks << 5)) + np * 16 * kRowBytes, r);
          b[2 * np][0] = r[0];
          b[2 * np][1] = r[1];
          b[2 * np + 1][0] = r[2];
          b[2 * np + 1][1] = r[3];
        }
      }
#pragma unroll
      for (int g = 0; g < kParts; ++g)
#pragma unroll
        for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
          for (int nt = 0; nt < T::kNTiles; ++nt) mma_bf16(acc[g][mt][nt], a[g][mt], b[nt][0], b[nt][1]);
    }
  }
  cp_async_wait<0>();

  // acc element i: output column acc_row, slot acc_col of its m16n8 tile.
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kNTiles; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int column = col0 + (warp_m * T::kMTiles + mt) * 16 + acc_row(lane, i);
        const int m = (warp_n * T::kNTiles + nt) * 8 + acc_col(lane, i);
        if (m >= n || column >= kColumnsAll) continue;
        const long long slot = slots[m];
        if constexpr (kGateUp) {
          // rounded as the activation type would hold it between the GEMMs (moe_gate_up)
          const float g = round_to<bf16>(acc[0][mt][nt][i]), u = round_to<bf16>(acc[kParts - 1][mt][nt][i]);
          reinterpret_cast<bf16*>(p.act)[slot * F + column] = from_float<bf16>(silu(g) * u);
        } else {
          const float weight = to_float(static_cast<const Out*>(p.weights)[slot]);
          p.partial[slot * H + column] = weight * round_to<Out>(acc[0][mt][nt][i]);
        }
      }
}

// Config: using X, W (both bf16), Out; kHidden, kFfn, kExperts, kTopK.
// Grid moe_mma::grid(true, ...), block [256], dynamic smem moe_mma::smem_bytes.
template <class Config>
__device__ __forceinline__ void moe_gate_up_mma(const MoeExpertsParams& p) {
  if (moe_mma::wide(p.rows, Config::kTopK, Config::kExperts))
    moe_mma_tile<Config, true, moe_mma::Tile<true, true>>(p);
  else
    moe_mma_tile<Config, true, moe_mma::Tile<true, false>>(p);
}

// Config: as moe_gate_up_mma; reads act as bf16 [rows · top_k, ffn].
// Grid moe_mma::grid(false, ...).
template <class Config>
__device__ __forceinline__ void moe_down_mma(const MoeExpertsParams& p) {
  if (moe_mma::wide(p.rows, Config::kTopK, Config::kExperts))
    moe_mma_tile<Config, false, moe_mma::Tile<false, true>>(p);
  else
    moe_mma_tile<Config, false, moe_mma::Tile<false, false>>(p);
}

}  // namespace kernels
}  // namespace kiln

#endif  // __CUDACC__ || __CUDACC_RTC__ || KILN_CUDA_EMULATION
