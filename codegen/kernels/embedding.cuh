// Token embedding gather: one table row per token, dequantized to Config::Out
// (bf16, or f32 when it starts an f32 residual stream).
//
//   tokens [N] i32, table [vocab, hidden] (Config::Table), out [N, hidden] Config::Out
//
// Table formats: plain rows (float, bf16, f16) or ggml's 32-element blocks
// (q8_0: {f16 d; i8 qs[32]} = d·q; q4_0: {f16 d; u8 qs[16]} = d·(q - 8);
// q4_1: {f16 d, m; u8 qs[16]} = d·q + m; element i of a block is the low
// nibble of qs[i], element 16 + i the high one). Grid [N], block [Config::kThreads].
// A Config with kScale multiplies each element by it in f32 before the one
// rounding to Out (gemma3's sqrt(hidden), already rounded to the table's type).
#pragma once

#include "common.cuh"

namespace kiln {
namespace kernels {

struct TableQ8_0 { static constexpr int kBlockBytes = 34; };
struct TableQ4_0 { static constexpr int kBlockBytes = 18; };
struct TableQ4_1 { static constexpr int kBlockBytes = 20; };

__device__ __forceinline__ float f16_bits(const unsigned char* p) {
  return __half2float(__ushort_as_half((unsigned short)(p[0] | (p[1] << 8))));
}

template <class Table> struct TableRow {
  static constexpr long long bytes(int hidden) { return (long long)hidden * sizeof(Table); }
  static __device__ __forceinline__ float at(const unsigned char* row, int i) {
    return to_float(reinterpret_cast<const Table*>(row)[i]);
  }
};
template <> struct TableRow<TableQ8_0> {
  static constexpr long long bytes(int hidden) { return (long long)hidden / 32 * 34; }
  static __device__ __forceinline__ float at(const unsigned char* row, int i) {
    const unsigned char* blk = row + (i / 32) * 34;
    return f16_bits(blk) * (float)(signed char)blk[2 + i % 32];
  }
};
template <> struct TableRow<TableQ4_0> {
  static constexpr long long bytes(int hidden) { return (long long)hidden / 32 * 18; }
  static __device__ __forceinline__ float at(const unsigned char* row, int i) {
    const unsigned char* blk = row + (i / 32) * 18;
    const int j = i % 32;
    const int q = j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4);
    return f16_bits(blk) * (float)(q - 8);
  }
};
template <> struct TableRow<TableQ4_1> {
  static constexpr long long bytes(int hidden) { return (long long)hidden / 32 * 20; }
  static __device__ __forceinline__ float at(const unsigned char* row, int i) {
    const unsigned char* blk = row + (i / 32) * 20;
    const int j = i % 32;
    const int q = j < 16 ? (blk[4 + j] & 15) : (blk[4 + j - 16] >> 4);
    return f16_bits(blk) * (float)q + f16_bits(blk + 2);
  }
};

// Config::kScale where the Config has one, else 1.
template <class Config, class = void> struct EmbeddingScale { static constexpr float value = 1.0f; };
template <class Config> struct EmbeddingScale<Config, decltype(void(Config::kScale))> {
  static constexpr float value = Config::kScale;
};

// Config: using Table, Out; static constexpr int kHidden, kThreads (, float kScale).
template <class Config>
__device__ __forceinline__ void embedding(const EmbeddingParams& p) {
  using Row = TableRow<typename Config::Table>;
  const int t = blockIdx.x;
  if (t >= p.num_tokens) return;
  const int id = p.tokens[t];
  using Out = typename Config::Out;
  Out* out = static_cast<Out*>(p.out) + (long long)t * Config::kHidden;
  if (id < 0 || id >= p.vocab) {
    for (int i = threadIdx.x; i < Config::kHidden; i += Config::kThreads) out[i] = from_float<Out>(0.0f);
    return;
  }
  const unsigned char* row =
      static_cast<const unsigned char*>(p.table) + (long long)id * Row::bytes(Config::kHidden);
  constexpr float kScale = EmbeddingScale<Config>::value;
  for (int i = threadIdx.x; i < Config::kHidden; i += Config::kThreads)
    out[i] = from_float<Out>(kScale == 1.0f ? Row::at(row, i) : Row::at(row, i) * kScale);
}

}  // namespace kernels
}  // namespace kiln
