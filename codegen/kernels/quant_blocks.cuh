// Block-quantized GEMM weights as the CUDA kernels read them: ggml's
// 32-element blocks (q4_0, q4_1, q8_0, and kiln's int8/int4 made into such
// blocks at load) and K-quant sub-blocks (q4_k, q5_k, q6_k), repacked once
// (runtime/numerics/packed_blocks.h) into
// tiles laid out for the tensor cores' m16n8k16 A fragments, so that
// gemm_quant.cuh loads 16 bytes a lane and turns them into fragments in
// registers, with no shuffle or shared memory (Marlin's idea). The bits per
// weight stay those of the blocks.
//
// W [N, K] is cut into tiles of 16 rows x 64 columns (N padded to 16 rows,
// K to 64 columns, with zero quants and zero scales). A tile's 64 columns
// are 4 mma steps of 16; step s covers columns 16 s .. 16 s + 15, and lane
// l = 4 g + t of a warp holds, for rows g and g + 8, the 4 columns
// c = 16 s + 4 t .. + 3 of each step. Inside a step the columns are fed to
// the mma in a permuted order (mma column 2t, 2t+1 -> c, c+1; mma column
// 2t+8, 2t+9 -> c+2, c+3): a dot product does not care, and x's matching
// B fragment is then 4 consecutive bf16 of one row of x, one 8-byte load.
//
// Quants, at byte 0, tiles in [row tile][k tile] order:
//   4-bit: a tile is [32 lanes][4 steps] u32 (512 bytes); the u32 of step s
//          holds nibbles 0..7 = W[g][c], W[g+8][c], W[g][c+2], W[g+8][c+2],
//          W[g][c+1], W[g+8][c+1], W[g][c+3], W[g+8][c+3]: nibbles i and
//          i + 4 are fragment register a_i's low and high bf16.
//   8-bit: a tile is [2 halves][32 lanes][2 steps] u32x2 (1024 bytes):
//          half h holds steps 2h and 2h+1, bytes 0..7 of a step = W[g][c],
//          W[g][c+1], W[g+8][c], W[g+8][c+1], W[g][c+2], W[g][c+3],
//          W[g+8][c+2], W[g+8][c+3], each as q + 128 (offset binary).
// Scales, f16, after the quants: [row tile][K / kGroup][8][2], the pair of
//   rows g and g + 8 of a group side by side (one u32 a lane).
// Mins (q4_1, q4_k, q5_k), f16, after the scales, laid out as the scales.
//
// An element is d·(q - 8) (q4_0), d·q + m (q4_1, q4_k, q5_k) or d·q (q8_0,
// q6_k with q - 32 stored), the CPU's dequantization (the K-quants' scales
// rounded to f16). The quants enter the mma as exact bf16
// integers; scales and mins apply to the f32 sums of each group.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common.cuh"
#endif
#include "tensor_core.cuh"  // pack_bf16x2

namespace kiln {
namespace kernels {

// The packed weight types a Config names as its Weight.
struct PackedQ4_0 { static constexpr int kBits = 4; static constexpr bool kMin = false; static constexpr int kOffset = 8; };
struct PackedQ4_1 { static constexpr int kBits = 4; static constexpr bool kMin = true; static constexpr int kOffset = 0; };
struct PackedQ8_0 { static constexpr int kBits = 8; static constexpr bool kMin = false; static constexpr int kOffset = 0; };
// q4_k runs as PackedQ4_1 and q6_k as PackedQ8_0 with groups of 16; q5_k's
// 5-bit quants take 8-bit tiles with mins.
struct PackedQ5_K { static constexpr int kBits = 8; static constexpr bool kMin = true; static constexpr int kOffset = 0; };

template <class W> struct IsPacked { static constexpr bool value = false; };
template <> struct IsPacked<PackedQ4_0> { static constexpr bool value = true; };
template <> struct IsPacked<PackedQ4_1> { static constexpr bool value = true; };
template <> struct IsPacked<PackedQ8_0> { static constexpr bool value = true; };
template <> struct IsPacked<PackedQ5_K> { static constexpr bool value = true; };

constexpr int kQuantTileRows = 16, kQuantTileCols = 64;

// The planes of an [n, k] matrix of `bits`-bit quants with one scale (and
// min) per `group` columns, in bytes from its start. Host and device.
struct QuantTiles {
  long long n, k;
  int bits, group;
  constexpr long long row_tiles() const { return (n + kQuantTileRows - 1) / kQuantTileRows; }
  constexpr long long k_tiles() const { return (k + kQuantTileCols - 1) / kQuantTileCols; }
  constexpr long long tile_bytes() const { return kQuantTileRows * kQuantTileCols * bits / 8; }
  constexpr long long groups() const { return (k_tiles() * kQuantTileCols + group - 1) / group; }  // padding's too
  constexpr long long quant_bytes() const { return row_tiles() * k_tiles() * tile_bytes(); }
  constexpr long long scales_at() const { return quant_bytes(); }
  constexpr long long scale_plane_bytes() const { return row_tiles() * groups() * kQuantTileRows * 2; }
  constexpr long long mins_at() const { return scales_at() + scale_plane_bytes(); }
  constexpr long long bytes(bool mins) const { return mins_at() + (mins ? scale_plane_bytes() : 0); }
  // Byte offset of row `row`'s scale of group `g` inside the scale plane.
  constexpr long long scale_offset(long long row, long long g) const {
    return ((row / 16 * groups() + g) * 8 + row % 8) * 4 + (row % 16 >= 8 ? 2 : 0);
  }
};
template <class W, int kN, int kK, int kGroup>
constexpr QuantTiles quant_tiles() { return QuantTiles{kN, kK, W::kBits, kGroup}; }

// Where element (row, col) of W sits in the quants: byte offset and, for
// 4-bit, the nibble (0 = low) inside it.
struct QuantSlot {
  long long byte;
  int nibble;
};
constexpr QuantSlot quant_slot(const QuantTiles& t, long long row, long long col) {
  const long long tile = row / 16 * t.k_tiles() + col / 64;
  const int r = int(row % 16), c = int(col % 64);
  const int s = c / 16, lane = (r % 8) * 4 + (c % 16) / 4, j = c % 4;  // j: c .. c + 3
  const int hi_row = r >= 8 ? 1 : 0;
  if (t.bits == 4) {
    // nibble = a_i index + 4 (high bf16), a_0..3 = (g, c..c+1), (g+8, c..c+1), (g, c+2..), (g+8, c+2..)
    const int reg = (j / 2) * 2 + hi_row, position = reg + 4 * (j % 2);
    return {tile * t.tile_bytes() + (lane * 4 + s) * 4 + position / 2, position % 2};
  }
  const int byte_in_step = (j / 2) * 4 + hi_row * 2 + j % 2;
  return {tile * t.tile_bytes() + (s / 2) * 512 + lane * 16 + (s % 2) * 8 + byte_in_step, 0};
}

}  // namespace kernels
}  // namespace kiln

#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(KILN_CUDA_EMULATION)

namespace kiln {
namespace kernels {

__device__ __forceinline__ float f16_bits_to_float(unsigned bits) {
#if defined(KILN_CUDA_EMULATION)
  return kiln::gpu_test::fromF16((unsigned short)bits);
#else
  return __half2float(__ushort_as_half((unsigned short)bits));
#endif
}
// The low and high bf16 of a pair as f32.
__device__ __forceinline__ float bf16x2_low(unsigned pair) { return __uint_as_float(pair << 16); }
__device__ __forceinline__ float bf16x2_high(unsigned pair) { return __uint_as_float(pair & 0xFFFF0000u); }

// bf16x2 of the two integers in bits 0-3 and 16-19 of `bits`, less `offset`:
// 0x4300 | q is the bf16 128 + q (q < 128 fits its 7-bit mantissa), and the
// subtraction is exact.
__device__ __forceinline__ unsigned nibbles_to_bf16x2(unsigned bits, int offset) {
  const unsigned biased = (bits & 0x000F000Fu) | 0x43004300u;
#if defined(KILN_CUDA_EMULATION)
  return pack_bf16x2(bf16x2_low(biased) - float(128 + offset), bf16x2_high(biased) - float(128 + offset));
#else
  const unsigned short c = offset == 8 ? 0xC308u : 0xC300u;  // -(128 + offset)
  const unsigned minus = (unsigned(c) << 16) | c;
  unsigned out;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out) : "r"(biased), "r"(0x3F803F80u), "r"(minus));
  return out;
#endif
}

// The four fragment registers a_0..a_3 of one step's 4-bit u32.
template <int kOffset>
__device__ __forceinline__ void unpack_q4_step(unsigned q, unsigned (&a)[4]) {
  a[0] = nibbles_to_bf16x2(q, kOffset);
  a[1] = nibbles_to_bf16x2(q >> 4, kOffset);
  a[2] = nibbles_to_bf16x2(q >> 8, kOffset);
  a[3] = nibbles_to_bf16x2(q >> 12, kOffset);
}

// The signed value of offset-binary byte `i` of `bits`, exactly, as f32:
// 0x4B000000 | u is 2^23 + u.
__device__ __forceinline__ float offset_byte_to_float(unsigned bits, int i) {
  return __uint_as_float(((bits >> (8 * i)) & 0xFFu) | 0x4B000000u) - 8388736.0f;
}

// The four fragment registers of one step's 8-bit u32x2 (lo, hi).
__device__ __forceinline__ void unpack_q8_step(unsigned lo, unsigned hi, unsigned (&a)[4]) {
  a[0] = pack_bf16x2(offset_byte_to_float(lo, 0), offset_byte_to_float(lo, 1));
  a[1] = pack_bf16x2(offset_byte_to_float(lo, 2), offset_byte_to_float(lo, 3));
  a[2] = pack_bf16x2(offset_byte_to_float(hi, 0), offset_byte_to_float(hi, 1));
  a[3] = pack_bf16x2(offset_byte_to_float(hi, 2), offset_byte_to_float(hi, 3));
}

// The fragment registers a_0..a_3 of step s (0..3) of a tile from the
// kBits / 4 16-byte loads of a lane.
template <class W>
__device__ __forceinline__ void unpack_step(const uint4 (&wq)[W::kBits / 4], int s, unsigned (&a)[4]) {
  if constexpr (W::kBits == 4) {
    const uint4& v = wq[0];
    unpack_q4_step<W::kOffset>(s == 0 ? v.x : s == 1 ? v.y : s == 2 ? v.z : v.w, a);
  } else {
    const uint4& half = wq[s / 2];
    unpack_q8_step(s % 2 ? half.z : half.x, s % 2 ? half.w : half.y, a);
  }
}

}  // namespace kernels
}  // namespace kiln

#endif
