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
// Like gemv.cuh: the block's 8 warps are 8 / kSplitK row tiles times
// kSplitK slices of K, each warp keeps kUnroll tiles of loads in flight,
// the first before waiting on the previous kernel (weights never change),
// the split-K partials meet in shared memory in a fixed order (no atomics,
// so the result does not depend on the batch or timing), and gemv.cuh's
// plain epilogue adds the bf16 bias and writes y.
//
//   x [rows, K] bf16, W [N, K] packed (Config::Weight), bias [N] bf16, y [rows, N] bf16
//
// Grid [ceil(N / kRowsPerBlock), 1, ceil(rows / kMaxRows)], block [256].
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
//         kSplitK, kUnroll, kRowsPerBlock (= 8 / kSplitK * 16);
//         static constexpr bool kBias, kSiluMul (false), kRope (false).
template <class Config>
__device__ __forceinline__ void gemm_quant(const GemvParams& p) {
  using W = typename Config::Weight;
  constexpr int kK = Config::kK, kGroup = Config::kGroup, kM = Config::kMaxRows;
  constexpr int kSplit = Config::kSplitK, kUnroll = Config::kUnroll;
  constexpr QuantTiles kTiles = quant_tiles<W, Config::kN, kK, kGroup>();
  constexpr int kKTiles = int((kK + kQuantTileCols - 1) / kQuantTileCols);
  constexpr int kLoads = W::kBits / 4;  // 16-byte loads a lane per tile
  constexpr int kMTiles = kM / 8;
  // Steps (of 16 columns) that share a scale inside a tile, and the groups a tile spans.
  constexpr int kStepsPerGroup = kGroup >= 64 ? 4 : kGroup / 16;
  constexpr int kTileGroups = 4 / kStepsPerGroup;
  constexpr int kWarpRowTiles = 8 / kSplit;
  static_assert(kGroup % 16 == 0 && (kGroup >= 64 ? kGroup % 64 == 0 : 64 % kGroup == 0),
                "a group is 16 or 32 columns, or whole tiles");
  static_assert(kK % 16 == 0 && kM % 8 == 0, "whole mma steps and x tiles");
  static_assert(Config::kRowsPerBlock == kWarpRowTiles * kQuantTileRows, "8 warps per block");
  static_assert(!Config::kSiluMul && !Config::kRope, "the plain epilogue");
#if defined(KILN_CUDA_EMULATION)
  using Partials = float[Config::kRowsPerBlock * kSplit][kM];
  Partials& partial = *reinterpret_cast<Partials*>(emulated_shared_memory(int(sizeof(Partials))));
#else
  __shared__ float partial[Config::kRowsPerBlock * kSplit][kM];
#endif

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
  // One grid of x rows reads each weight byte once (evict-first, as gemv.cuh).
  const unsigned long long policy = gridDim.z == 1 ? l2_policy_evict_first() : l2_policy_evict_normal();

  uint4 wq[kUnroll][kLoads];
  unsigned scale[kUnroll][kTileGroups], min_pair[kUnroll][kTileGroups];
  uint2 xb[kUnroll][kMTiles][4];  // B fragments of each step
  auto load_weights = [&](int kt0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int kt = kt0 + u * kSplit;
      if (!active || kt >= kKTiles) continue;
#pragma unroll
      for (int h = 0; h < kLoads; ++h) wq[u][h] = load_u128_stream(quants + kt * kTiles.tile_bytes() + h * 512, policy);
#pragma unroll
      for (int q = 0; q < kTileGroups; ++q) {
        const long long group = ((long long)kt * kQuantTileCols + q * kStepsPerGroup * 16) / kGroup;
        const long long at = kTiles.scale_offset(row_tile * kQuantTileRows + g, group);
        scale[u][q] = load_u32_nc(w + kTiles.scales_at() + at);
        if constexpr (W::kMin) min_pair[u][q] = load_u32_nc(w + kTiles.mins_at() + at);
      }
    }
  };
  auto load_x = [&](int kt0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int kt = kt0 + u * kSplit;
#pragma unroll
      for (int j = 0; j < kMTiles; ++j)
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          const int col = kt * kQuantTileCols + s * 16 + t * 4, m = j * 8 + g;
          if (active && kt < kKTiles && col < kK && m < m_count)
            xb[u][j][s] = *reinterpret_cast<const uint2*>(x + (long long)m * kK + col);
          else
            xb[u][j][s] = uint2{0u, 0u};
        }
    }
  };

  float acc[kMTiles][4];
#pragma unroll
  for (int j = 0; j < kMTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;
  const unsigned ones[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};  // bf16 1.0 pairs

  load_weights(split);
  wait_for_previous_kernel();
  allow_next_kernel();
  load_x(split);
  for (int kt0 = split; kt0 < kKTiles; kt0 += kSplit * kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int kt = kt0 + u * kSplit;
      if (!active || kt >= kKTiles) break;
#pragma unroll
      for (int q = 0; q < kTileGroups; ++q) {
        float sums[kMTiles][4], x_sums[kMTiles][4];
#pragma unroll
        for (int j = 0; j < kMTiles; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) sums[j][i] = x_sums[j][i] = 0.0f;
#pragma unroll
        for (int ss = 0; ss < kStepsPerGroup; ++ss) {
          const int s = q * kStepsPerGroup + ss;
          if (kK % kQuantTileCols != 0 && kt * kQuantTileCols + s * 16 >= kK) break;  // K's padding
          unsigned a[4];
          unpack_step<W>(wq[u], s, a);
#pragma unroll
          for (int j = 0; j < kMTiles; ++j) {
            mma_bf16(sums[j], a, xb[u][j][s].x, xb[u][j][s].y);
            if constexpr (W::kMin) mma_bf16(x_sums[j], ones, xb[u][j][s].x, xb[u][j][s].y);
          }
        }
        // Rows g (accumulators 0, 1) and g + 8 (2, 3) of the group.
        const float d_lo = f16_bits_to_float(scale[u][q] & 0xFFFFu), d_hi = f16_bits_to_float(scale[u][q] >> 16);
        float m_lo = 0.0f, m_hi = 0.0f;
        if constexpr (W::kMin) {
          m_lo = f16_bits_to_float(min_pair[u][q] & 0xFFFFu);
          m_hi = f16_bits_to_float(min_pair[u][q] >> 16);
        }
#pragma unroll
        for (int j = 0; j < kMTiles; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            acc[j][i] = fmaf(i < 2 ? d_lo : d_hi, sums[j][i], acc[j][i]);
            if constexpr (W::kMin) acc[j][i] = fmaf(i < 2 ? m_lo : m_hi, x_sums[j][i], acc[j][i]);
          }
      }
    }
    if (kt0 + kSplit * kUnroll < kKTiles) {
      load_weights(kt0 + kSplit * kUnroll);
      load_x(kt0 + kSplit * kUnroll);
    }
  }
#pragma unroll
  for (int j = 0; j < kMTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      partial[(warp_row * kQuantTileRows + acc_row(lane, i)) * kSplit + split][j * 8 + acc_col(lane, i)] = acc[j][i];
  __syncthreads();
  gemv_epilogue<Config, kSplit>(p, blockIdx.x, m0, m_count, partial, GemvRopeLane{});
}

}  // namespace kernels
}  // namespace kiln
