// Decode GEMV of a 2:4 structured-sparse weight: y [rows, n] = x [rows, k]
// · Wᵀ (+ bias) for rows = 1..kMaxRows (<= 8) activation rows, W in the
// layout of docs/design/sparsity.md with the canonical metadata plane
// (sparse24_params.cuh). It reads only the kept values and the metadata:
// for bf16 values, half the bytes of the dense bf16 row plus an eighth of
// that for the indices.
//
//   x [rows, k] bf16, values [n] rows (Config::Values), metadata [n, k/32] u32,
//   bias [n] bf16, y [rows, n] Config::Y (bf16 or f32)
//
// Entry: kiln::kernels::sparse24_gemv<Config>(const Sparse24Params&), the
// instance kind `sparse24_gemv` (codegen/cuda/instance_source.cc).
// Config: using Values (Sparse24Bf16, Sparse24Q8_0, Sparse24Q4_0), Y;
//   static constexpr int kN, kK, kMaxRows, kRowsPerWarp, kSplitK, kUnroll,
//   kRowsPerBlock (= 8 / kSplitK * kRowsPerWarp); bool kBias.
// Grid [ceil(n / kRowsPerBlock), 1, ceil(rows / kMaxRows)], block [256].
//
// As gemv.cuh: a warp streams kRowsPerWarp weight rows, kUnroll loads of
// each in flight per lane before any math, the first issued before waiting
// on the previous kernel (weights never change); the block's 8 warps are
// 8 / kSplitK row groups times kSplitK slices of k, and the partial sums
// meet in shared memory in a fixed order (no atomics). A lane's unit is a
// block of Values: bf16, 16 bytes = 8 kept values of 16 input columns, so
// a warp's load is 512 contiguous bytes, with the 16 index bits beside;
// q8_0 and q4_0, one 34- or 18-byte block = 32 kept values of 64 columns,
// read as 4-byte words (blocks are only 2-byte aligned) with the 64 index
// bits beside, the q8_0 one as ggml's vector dot reads its blocks.
//
// Per group of four columns the lane loads x's four bf16 (two registers)
// and one byte permute picks the kept pair (x[i0], x[i1]), which lines up
// with the pair of values; sums are f32. The values plane is read up to
// the next 4-byte boundary past a row (inside any device allocation).
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common.cuh"
#endif
#include "quant_blocks.cuh"  // f16_bits_to_float, bf16x2_low / bf16x2_high
#include "sparse24_params.cuh"

namespace kiln {
namespace kernels {

__device__ __forceinline__ unsigned load_u32_stream(const void* p, unsigned long long policy) {
  unsigned v;
  asm volatile("ld.global.nc.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(policy));
  return v;
}
__device__ __forceinline__ unsigned load_u16_stream(const void* p, unsigned long long policy) {
  unsigned short v;
  asm volatile("ld.global.nc.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(policy));
  return v;
}
__device__ __forceinline__ uint2 load_u64_stream(const void* p, unsigned long long policy) {
  uint2 v;
  asm volatile("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;" : "=r"(v.x), "=r"(v.y) : "l"(p), "l"(policy));
  return v;
}

// The __byte_perm selector that takes bf16 i0 and i1 (of four in two
// registers) to the low and high half, from the group's nibble i0 | i1 << 2.
__device__ __forceinline__ unsigned sparse24_pair_selector(unsigned nibble) {
  const unsigned spread = (nibble & 3u) | ((nibble & 0xCu) << 6);  // i0 | i1 << 8
  return spread * 0x22u + 0x1010u;  // bytes 2 i0, 2 i0 + 1, 2 i1, 2 i1 + 1
}

// sum[m] += the dot of one quarter (16 input columns at x, 4 groups) with
// its 8 kept values w, for x rows m < m_count (rows kK apart).
template <int kM, int kK>
__device__ __forceinline__ void sparse24_quarter_dot(const float (&w)[8], unsigned meta16, const bf16* x, int m_count,
                                                     float (&sum)[kM]) {
  unsigned sel[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) sel[j] = sparse24_pair_selector((meta16 >> (4 * j)) & 0xFu);
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    if (m >= m_count) break;
    const uint4* xm = reinterpret_cast<const uint4*>(x + (long long)m * kK);
    const uint4 a = xm[0], b = xm[1];
    const unsigned xq[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    float s = sum[m];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const unsigned pair = __byte_perm(xq[2 * j], xq[2 * j + 1], sel[j]);
      s = fmaf(w[2 * j], bf16x2_low(pair), s);
      s = fmaf(w[2 * j + 1], bf16x2_high(pair), s);
    }
    sum[m] = s;
  }
}

// One lane's unit of Values: loaded first, multiplied later.
template <class Values> struct Sparse24Unit;

template <>
struct Sparse24Unit<Sparse24Bf16> {
  uint4 v;
  unsigned meta;
  __device__ __forceinline__ void load(const unsigned char* row_values, const unsigned char* row_meta, int unit,
                                       unsigned long long policy) {
    v = load_u128_stream(row_values + unit * 16, policy);
    meta = load_u16_stream(row_meta + unit * 2, policy);
  }
  template <int kM, int kK>
  __device__ __forceinline__ void dot(const bf16* x, int m_count, float (&acc)[kM]) const {
    const unsigned pairs[4] = {v.x, v.y, v.z, v.w};
    float w[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      w[2 * j] = bf16x2_low(pairs[j]);
      w[2 * j + 1] = bf16x2_high(pairs[j]);
    }
    sparse24_quarter_dot<kM, kK>(w, meta, x, m_count, acc);
  }
};

// A q8_0 / q4_0 block as the kWords 4-byte words from its start rounded down
// to 4 bytes; `offset` (0 or 2) is where it starts in the first word.
template <int kWords>
struct Sparse24QuantWords {
  unsigned w[kWords];
  unsigned offset;
  uint2 meta;
  __device__ __forceinline__ void load(const unsigned char* row_values, const unsigned char* row_meta, int unit,
                                       int block_bytes, unsigned long long policy) {
    const unsigned char* at = row_values + (long long)unit * block_bytes;
    offset = unsigned(reinterpret_cast<unsigned long long>(at) & 3u);
    const unsigned char* aligned = at - offset;
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = load_u32_stream(aligned + 4 * i, policy);
    meta = load_u64_stream(row_meta + unit * 8, policy);
  }
  __device__ __forceinline__ float scale() const { return f16_bits_to_float((w[0] >> (8 * offset)) & 0xFFFFu); }
  // Word i of the block's quants (the bytes after the scale).
  __device__ __forceinline__ unsigned quants(int i) const { return __funnelshift_rc(w[i], w[i + 1], 16 + 8 * offset); }
  __device__ __forceinline__ unsigned quarter_meta(int q) const { return ((q < 2 ? meta.x : meta.y) >> (16 * (q & 1))) & 0xFFFFu; }
};

template <>
struct Sparse24Unit<Sparse24Q8_0> : Sparse24QuantWords<9> {
  __device__ __forceinline__ void load(const unsigned char* row_values, const unsigned char* row_meta, int unit,
                                       unsigned long long policy) {
    Sparse24QuantWords<9>::load(row_values, row_meta, unit, Sparse24Q8_0::kBlockBytes, policy);
  }
  template <int kM, int kK>
  __device__ __forceinline__ void dot(const bf16* x, int m_count, float (&acc)[kM]) const {
    float sum[kM];
#pragma unroll
    for (int m = 0; m < kM; ++m) sum[m] = 0.0f;
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // quarter q: values 8q .. 8q + 7, quant words 2q, 2q + 1
      const unsigned lo = quants(2 * q), hi = quants(2 * q + 1);
      float w[8];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        w[b] = float(int((signed char)(lo >> (8 * b))));
        w[4 + b] = float(int((signed char)(hi >> (8 * b))));
      }
      sparse24_quarter_dot<kM, kK>(w, quarter_meta(q), x + 16 * q, m_count, sum);
    }
    const float d = scale();
#pragma unroll
    for (int m = 0; m < kM; ++m) acc[m] = fmaf(d, sum[m], acc[m]);
  }
};

template <>
struct Sparse24Unit<Sparse24Q4_0> : Sparse24QuantWords<5> {
  __device__ __forceinline__ void load(const unsigned char* row_values, const unsigned char* row_meta, int unit,
                                       unsigned long long policy) {
    Sparse24QuantWords<5>::load(row_values, row_meta, unit, Sparse24Q4_0::kBlockBytes, policy);
  }
  template <int kM, int kK>
  __device__ __forceinline__ void dot(const bf16* x, int m_count, float (&acc)[kM]) const {
    float sum[kM];
#pragma unroll
    for (int m = 0; m < kM; ++m) sum[m] = 0.0f;
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // values 8q .. 8q + 7: the low (q < 2) or high nibbles of bytes 8 (q % 2) ..
      const int shift = q < 2 ? 0 : 4;
      const unsigned lo = quants(2 * (q & 1)), hi = quants(2 * (q & 1) + 1);
      float w[8];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        w[b] = float(int((lo >> (8 * b + shift)) & 0xFu) - 8);
        w[4 + b] = float(int((hi >> (8 * b + shift)) & 0xFu) - 8);
      }
      sparse24_quarter_dot<kM, kK>(w, quarter_meta(q), x + 16 * q, m_count, sum);
    }
    const float d = scale();
#pragma unroll
    for (int m = 0; m < kM; ++m) acc[m] = fmaf(d, sum[m], acc[m]);
  }
};

template <class Config>
__device__ __forceinline__ void sparse24_gemv(const Sparse24Params& p) {
  using V = typename Config::Values;
  using Y = typename Config::Y;
  constexpr int kN = Config::kN, kK = Config::kK, kM = Config::kMaxRows, kSplit = Config::kSplitK;
  constexpr int kUnroll = Config::kUnroll, kR = Config::kRowsPerWarp, kRowsPerBlock = Config::kRowsPerBlock;
  constexpr int kUnits = kK / V::kBlockColumns;  // a lane's units in a row
  constexpr int kStride = 32 * kSplit;           // units between a lane's steps
  constexpr long long kRowBytes = sparse24_row_bytes<V>(kK), kMetaRowBytes = kK / 8;
  static_assert(kK % 64 == 0, "the 2:4 layout takes whole 64-column spans");
  static_assert(kM >= 1 && kM <= 8, "decode-sized batches");
  static_assert(kRowsPerBlock == 8 / kSplit * kR, "8 warps per block");
  __shared__ float partial[kRowsPerBlock * kSplit][kM];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / kSplit, split = warp % kSplit;
  const int m0 = blockIdx.z * kM;
  const int m_count = min(kM, p.rows - m0);
  const bf16* x = static_cast<const bf16*>(p.x) + (long long)m0 * kK;
  const unsigned char* values = static_cast<const unsigned char*>(p.values);
  const unsigned char* meta = reinterpret_cast<const unsigned char*>(p.metadata);
  int w_row[kR];  // -1 past the matrix
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int n = blockIdx.x * kRowsPerBlock + group * kR + r;
    w_row[r] = n < kN ? n : -1;
  }
  const unsigned long long policy = gridDim.z == 1 ? l2_policy_evict_first() : l2_policy_evict_normal();

  Sparse24Unit<V> unit[kUnroll][kR];
  auto load_units = [&](int u0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int at = u0 + u * kStride;
#pragma unroll
      for (int r = 0; r < kR; ++r)
        if (at < kUnits && w_row[r] >= 0)
          unit[u][r].load(values + w_row[r] * kRowBytes, meta + w_row[r] * kMetaRowBytes, at, policy);
    }
  };
  load_units(split * 32 + lane);
  wait_for_previous_kernel();
  allow_next_kernel();

  float acc[kR][kM];
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int m = 0; m < kM; ++m) acc[r][m] = 0.0f;
  for (int u0 = split * 32 + lane; u0 < kUnits; u0 += kStride * kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int at = u0 + u * kStride;
      if (at >= kUnits) break;
#pragma unroll
      for (int r = 0; r < kR; ++r)
        if (w_row[r] >= 0) unit[u][r].template dot<kM, kK>(x + at * V::kBlockColumns, m_count, acc[r]);
    }
    if (u0 + kStride * kUnroll < kUnits) load_units(u0 + kStride * kUnroll);
  }
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const float s = warp_sum(acc[r][m]);
      if (lane == 0) partial[(group * kR + r) * kSplit + split][m] = s;
    }
  __syncthreads();
  // Row slots fastest, so neighbouring threads write neighbouring outputs.
  for (int i = threadIdx.x; i < kRowsPerBlock * kM; i += 256) {
    const int slot = i % kRowsPerBlock, m = i / kRowsPerBlock;
    const int n = blockIdx.x * kRowsPerBlock + slot;
    if (n >= kN || m >= m_count) continue;
    float sum = 0.0f;
    for (int s = 0; s < kSplit; ++s) sum += partial[slot * kSplit + s][m];
    if (Config::kBias) sum += to_float(static_cast<const bf16*>(p.bias)[n]);
    static_cast<Y*>(p.y)[(long long)(m0 + m) * kN + n] = from_float<Y>(sum);
  }
}

}  // namespace kernels
}  // namespace kiln
