// A packed block-quantized weight (quant_blocks.cuh's tiles) expanded to
// bf16 rows, for the batches whose GEMM cuBLASLt runs: those read W once per
// row of x anyway, and the expansion costs a pass over W beside a GEMM of
// many rows. A thread takes one lane's step of one tile, as gemm_quant.cuh
// unpacks it: rows g and g + 8, 4 columns each, two 8-byte stores.
//
//   w [N, K] packed (Config::Weight), out [N, K] bf16
//
// Grid [ceil(row tiles · k tiles · 128 / kThreads)], block [Config::kThreads].
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common.cuh"
#endif
#include "tensor_core.cuh"  // pack_bf16x2
#include "quant_blocks.cuh"

namespace kiln {
namespace kernels {

// Config: using Weight; static constexpr int kN, kK, kGroup, kThreads.
template <class Config>
__device__ __forceinline__ void dequantize(const DequantizeParams& p) {
  using W = typename Config::Weight;
  constexpr QuantTiles kTiles = quant_tiles<W, Config::kN, Config::kK, Config::kGroup>();
  constexpr long long kKTiles = kTiles.k_tiles();
  const long long item = (long long)blockIdx.x * Config::kThreads + threadIdx.x;
  if (item >= kTiles.row_tiles() * kKTiles * 128) return;
  const long long tile = item / 128;
  const int lane = int(item % 128) / 4, s = int(item % 4), g = lane / 4, t = lane % 4;
  const long long row = tile / kKTiles * kQuantTileRows + g, col = tile % kKTiles * kQuantTileCols + s * 16 + t * 4;
  // The weights never change: read them before the previous kernel ends;
  // out may still be read by the previous GEMM, so write after it.
  const unsigned char* w = static_cast<const unsigned char*>(p.w);
  const unsigned long long policy = l2_policy_evict_first();
  uint4 wq[W::kBits / 4];
#pragma unroll
  for (int h = 0; h < W::kBits / 4; ++h) wq[h] = load_u128_stream(w + tile * kTiles.tile_bytes() + h * 512 + lane * 16, policy);
  const long long at = kTiles.scale_offset(row, col / Config::kGroup);
  const unsigned scales = load_u32_nc(w + kTiles.scales_at() + at);
  const unsigned mins = W::kMin ? load_u32_nc(w + kTiles.mins_at() + at) : 0u;
  wait_for_previous_kernel();
  allow_next_kernel();
  if (col >= Config::kK) return;  // K's padding
  unsigned a[4];
  unpack_step<W>(wq, s, a);
#pragma unroll
  for (int half = 0; half < 2; ++half) {  // rows g, g + 8: registers a_half, a_half+2
    const long long r = row + 8 * half;
    if (r >= Config::kN) continue;
    const float d = f16_bits_to_float(half ? scales >> 16 : scales & 0xFFFFu);
    const float m = f16_bits_to_float(half ? mins >> 16 : mins & 0xFFFFu);
    const unsigned lo = a[half], hi = a[half + 2];
    uint2 out;
    out.x = pack_bf16x2(fmaf(d, bf16x2_low(lo), m), fmaf(d, bf16x2_high(lo), m));
    out.y = pack_bf16x2(fmaf(d, bf16x2_low(hi), m), fmaf(d, bf16x2_high(hi), m));
    *reinterpret_cast<uint2*>(static_cast<bf16*>(p.out) + r * Config::kK + col) = out;
  }
}

}  // namespace kernels
}  // namespace kiln
