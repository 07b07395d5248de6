// Skinny GEMM of block-quantized weights on the tensor cores (W4A16,
// W8A16): y = x · Wᵀ (+ bias) for decode-sized batches, W in the packed
// tiles of quant_blocks.cuh, x and y bf16.
//
// Decode is a stream of W, and 4-bit W leaves little time per weight:
// at the HBM rate an SM has about 4 instructions a weight for everything.
// So the weights never pass through f32: each lane loads 16 bytes (a tile
// of 16 rows x 64 columns is one load for the warp), turns every 4 bits
// into a bf16 fragment register pair with one mask-or and one bf16x2 fma
// (the quants are exact small integers), and the m16n8k16 mma multiplies
// them with x, whose B fragments are 8-byte loads of x rows thanks to the
// tile's column order. Scales (and q4_1's mins) apply to each group's f32
// sums, per weight row: mins through the same mma with an all-ones A, which
// sums x over the group. x rows are the mma's n: 8 a tile, kMaxRows / 8
// tiles, zero past the batch.
//
// The block's 8 warps are 8 / kSplitK row tiles times kSplitK slices of K.
// A decode GEMM of 4-bit weights is a few megabytes, read in microseconds,
// so what limits it is bytes in flight, not registers: each warp streams
// its tiles (quants and scales) through a ring of kStages slots in shared
// memory with cp.async, kStages - 1 tiles ahead, the first before waiting
// on the previous kernel (weights never change); x, small and hot in L2,
// comes one tile ahead in registers. The split-K partials meet in shared
// memory in a fixed order (no atomics, so the result does not depend on
// the batch or timing), and gemv.cuh's plain epilogue adds the bf16 bias
// and writes y.
//
//   x [rows, K] bf16, W [N, K] packed (Config::Weight), bias [N] bf16, y [rows, N] bf16
//
// Grid [ceil(N / kRowsPerBlock), 1, ceil(rows / kMaxRows)], block [256],
// dynamic shared memory kSmemBytes (quant_blocks.cuh: GemmQuantSmem).
// The kernel body also compiles on the host under KILN_CUDA_EMULATION
// (test/gpu/gemm_quant_emulation_test.cc).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common.cuh"
#endif
#include "tensor_core.cuh"  // mma_bf16, pack_bf16x2, the accumulator layout
#include "gemv.cuh"  // gemv_epilogue
#include "quant_blocks.cuh"

namespace kiln {
namespace kernels {

// Config: using Weight; static constexpr int kN, kK, kGroup, kMaxRows,
//         kSplitK, kStages, kRowsPerBlock (= 8 / kSplitK * 16), kSmemBytes;
//         static constexpr bool kBias, kSiluMul (false), kRope (false).
template <class Config>
__device__ __forceinline__ void gemm_quant(const GemvParams& p) {
  using W = typename Config::Weight;
  constexpr int kK = Config::kK, kGroup = Config::kGroup, kM = Config::kMaxRows;
  constexpr int kSplit = Config::kSplitK, kStages = Config::kStages;
  constexpr QuantTiles kTiles = quant_tiles<W, Config::kN, kK, kGroup>();
  constexpr int kKTiles = int((kK + kQuantTileCols - 1) / kQuantTileCols);
  constexpr int kLoads = W::kBits / 4;  // 16-byte copies a lane per tile
  constexpr int kMTiles = kM / 8;
  // Steps (of 16 columns) that share a scale inside a tile, and the groups a tile spans.
  constexpr int kTileGroups = quant_tile_groups(kGroup);
  constexpr int kStepsPerGroup = 4 / kTileGroups;
  constexpr int kWarpRowTiles = 8 / kSplit;
  constexpr GemmQuantSmem kSmem{kM, W::kBits, kTileGroups, kStages, W::kMin};
  static_assert(kGroup % 16 == 0 && (kGroup >= 64 ? kGroup % 64 == 0 : 64 % kGroup == 0),
                "a group is 16 or 32 columns, or whole tiles");
  static_assert(kK % 16 == 0 && kM % 8 == 0, "whole mma steps and x tiles");
  static_assert(Config::kRowsPerBlock == kWarpRowTiles * kQuantTileRows, "8 warps per block");
  static_assert(Config::kSmemBytes == kSmem.bytes(), "the shared memory the host generates");
  static_assert(kStages >= 2, "a tile in use and one arriving");
  static_assert(!Config::kSiluMul && !Config::kRope, "the plain epilogue");
#if defined(KILN_CUDA_EMULATION)
  unsigned char* smem = emulated_shared_memory(Config::kSmemBytes);
#else
  extern __shared__ __align__(16) unsigned char smem[];
#endif
  using Partials = float[Config::kRowsPerBlock * kSplit][kM];
  Partials& partial = *reinterpret_cast<Partials*>(smem);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int warp_row = warp / kSplit, split = warp % kSplit;
  const long long row_tile = (long long)blockIdx.x * kWarpRowTiles + warp_row;
  const bool active = row_tile < kTiles.row_tiles();
  const int m0 = blockIdx.z * kM;
  const int m_count = min(kM, p.rows - m0);
  const unsigned char* w = static_cast<const unsigned char*>(p.w);
  const unsigned char* quants = w + row_tile * kKTiles * kTiles.tile_bytes() + lane * 16;
  const bf16* x = static_cast<const bf16*>(p.x) + (long long)m0 * kK;
  // This warp's tiles: kt = split, split + kSplit, ... Each lane copies its
  // own 16 bytes of each (and its scales) into its slots of the warp's ring
  // and reads back only those, so the copies need no barrier, only a wait.
  const int tiles = active && split < kKTiles ? (kKTiles - split + kSplit - 1) / kSplit : 0;
  auto quant_slot = [&](int stage, int h) {
    return smem + kSmem.quants_at() + (((warp * kStages + stage) * kLoads + h) * 32 + lane) * 16;
  };
  auto scale_slot = [&](int at, int stage, int q) {
    return smem + at + (((warp * kStages + stage) * kTileGroups + q) * 32 + lane) * 4;
  };
  auto issue = [&](int i) {
    if (i < tiles) {
      const int kt = split + i * kSplit, stage = i % kStages;
#pragma unroll
      for (int h = 0; h < kLoads; ++h) cp_async_16(quant_slot(stage, h), quants + kt * kTiles.tile_bytes() + h * 512, 16);
#pragma unroll
      for (int q = 0; q < kTileGroups; ++q) {
        const long long group = ((long long)kt * kQuantTileCols + q * kStepsPerGroup * 16) / kGroup;
        const long long at = kTiles.scale_offset(row_tile * kQuantTileRows + g, group);
        cp_async_4(scale_slot(kSmem.scales_at(), stage, q), w + kTiles.scales_at() + at);
        if constexpr (W::kMin) cp_async_4(scale_slot(kSmem.mins_at(), stage, q), w + kTiles.mins_at() + at);
      }
    }
    cp_async_commit();  // empty past the last tile: every wait counts the same groups
  };
  // x's B fragments of each step of tile i (zero past the batch and K).
  auto load_x = [&](int i, uint2 (&xb)[kMTiles][4]) {
    const int kt = split + i * kSplit;
#pragma unroll
    for (int j = 0; j < kMTiles; ++j)
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const int col = kt * kQuantTileCols + s * 16 + t * 4, m = j * 8 + g;
        if (i < tiles && col < kK && m < m_count)
          xb[j][s] = *reinterpret_cast<const uint2*>(x + (long long)m * kK + col);
        else
          xb[j][s] = uint2{0u, 0u};
      }
  };

  float acc[kMTiles][4];
#pragma unroll
  for (int j = 0; j < kMTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;
  const unsigned ones[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};  // bf16 1.0 pairs

  // The ring fills before the wait on the previous kernel: weights never change.
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue(i);
  wait_for_previous_kernel();
  allow_next_kernel();
  uint2 x_next[kMTiles][4];
  load_x(0, x_next);
  for (int i = 0; i < tiles; ++i) {
    cp_async_wait<kStages - 2>();  // tile i has landed
    const int kt = split + i * kSplit, stage = i % kStages;
    uint4 wq[kLoads];
    unsigned scale[kTileGroups], min_pair[kTileGroups];
#pragma unroll
    for (int h = 0; h < kLoads; ++h) wq[h] = *reinterpret_cast<const uint4*>(quant_slot(stage, h));
#pragma unroll
    for (int q = 0; q < kTileGroups; ++q) {
      scale[q] = *reinterpret_cast<const unsigned*>(scale_slot(kSmem.scales_at(), stage, q));
      min_pair[q] = W::kMin ? *reinterpret_cast<const unsigned*>(scale_slot(kSmem.mins_at(), stage, q)) : 0u;
    }
    issue(i + kStages - 1);  // into the slot tile i - 1 left
    uint2 xb[kMTiles][4];
#pragma unroll
    for (int j = 0; j < kMTiles; ++j)
#pragma unroll
      for (int s = 0; s < 4; ++s) xb[j][s] = x_next[j][s];
    load_x(i + 1, x_next);
#pragma unroll
    for (int q = 0; q < kTileGroups; ++q) {
      float sums[kMTiles][4], x_sums[kMTiles][4];
#pragma unroll
      for (int j = 0; j < kMTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) sums[j][e] = x_sums[j][e] = 0.0f;
#pragma unroll
      for (int ss = 0; ss < kStepsPerGroup; ++ss) {
        const int s = q * kStepsPerGroup + ss;
        if (kK % kQuantTileCols != 0 && kt * kQuantTileCols + s * 16 >= kK) break;  // K's padding
        unsigned a[4];
        unpack_step<W>(wq, s, a);
#pragma unroll
        for (int j = 0; j < kMTiles; ++j) {
          mma_bf16(sums[j], a, xb[j][s].x, xb[j][s].y);
          if constexpr (W::kMin) mma_bf16(x_sums[j], ones, xb[j][s].x, xb[j][s].y);
        }
      }
      // Rows g (accumulators 0, 1) and g + 8 (2, 3) of the group.
      const float d_lo = f16_bits_to_float(scale[q] & 0xFFFFu), d_hi = f16_bits_to_float(scale[q] >> 16);
      const float m_lo = f16_bits_to_float(min_pair[q] & 0xFFFFu), m_hi = f16_bits_to_float(min_pair[q] >> 16);
#pragma unroll
      for (int j = 0; j < kMTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          acc[j][e] = fmaf(e < 2 ? d_lo : d_hi, sums[j][e], acc[j][e]);
          if constexpr (W::kMin) acc[j][e] = fmaf(e < 2 ? m_lo : m_hi, x_sums[j][e], acc[j][e]);
        }
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int j = 0; j < kMTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      partial[(warp_row * kQuantTileRows + acc_row(lane, e)) * kSplit + split][j * 8 + acc_col(lane, e)] = acc[j][e];
  __syncthreads();
  gemv_epilogue<Config, kSplit>(p, blockIdx.x, m0, m_count, partial, GemvRopeLane{});
}

}  // namespace kernels
}  // namespace kiln
