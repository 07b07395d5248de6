// The 2:4 structured-sparse linears' parameter struct and value types
// (docs/design/sparsity.md), shared by the kernels (sparse24_gemv.cuh,
// sparse24_mma.cuh) and the host code that prepares their weights and
// launches them. Plain C types and constexpr only, as kernel_params.cuh.
//
// A weight W [n, k] (k % 64 == 0) is its values plane, row r's kept values
// V[r, 0 .. k/2) in the storage of Config::Values, and a metadata plane:
//   canonical (the GEMV's): [n, k/32] u32, group g's nibble i0 | i1 << 2 at
//     bits 4 (g % 8) of word g / 8 (the layout's own plane);
//   mma order (the GEMM's, runtime/cuda/executor/sparse24_layout.h):
//     [ceil(n/16), k/64, 32] u32, word [tile][pair][lane] = the register
//     lane 4g + t gives mma.sp for rows 16 tile + g and + 8, columns
//     64 pair + 32 (t / 2) .. + 31, half t % 2 (sparsity selector t / 2).
#pragma once

namespace kiln {
namespace kernels {

// y [rows, n] = x [rows, k] · Wᵀ (+ bias), W 2:4 sparse.
struct Sparse24Params {
  const void* x;             // [rows, k] bf16
  const void* values;        // [n] rows of Config::Values' kept values (row_bytes each)
  const unsigned* metadata;  // canonical (gemv) or mma order (gemm), 16-byte aligned
  const void* bias;          // [n] bf16, or null when !Config::kBias
  void* y;                   // [rows, n] Config::Y (bf16 or f32)
  int rows;
};

// Kept values as bf16 (`sp24` on the CUDA backend): k/2 values a row.
struct Sparse24Bf16 {
  static constexpr int kBlockBytes = 16;    // one 16-byte load: 8 values
  static constexpr int kBlockColumns = 16;  // the input columns they cover
};
// q8_0 blocks (`int8sp24`): f16 d, then 32 int8 q; value = d q.
struct Sparse24Q8_0 {
  static constexpr int kBlockBytes = 34;
  static constexpr int kBlockColumns = 64;
};
// q4_0 blocks (`int4sp24`): f16 d, then 16 bytes, value j in the low
// nibble of byte j and value j + 16 in the high one; value = d (q - 8).
struct Sparse24Q4_0 {
  static constexpr int kBlockBytes = 18;
  static constexpr int kBlockColumns = 64;
};

// Bytes of one row of kept values for k input columns.
template <class Values>
constexpr long long sparse24_row_bytes(long long k) {
  return k / Values::kBlockColumns * Values::kBlockBytes;
}

// The GEMM's tile of the mma-order metadata: 16 rows by 64 columns, 32 words.
constexpr int kSparse24MetaTileRows = 16, kSparse24MetaTileColumns = 64;

}  // namespace kernels
}  // namespace kiln
