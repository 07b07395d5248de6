// Which kernel runs a gemm step at a batch's row count, and so which steps
// folded into it are done there, among the variants the plan lists (the
// row ranges are the compiler's: codegen/cuda/kernel_selection.h):
//   - a skinny kernel (skinnyKernel) where one of its ranges holds the
//     rows: the single-row instance, or the skinny (or fused) one;
//   - gemm_swiglu_wgmma where its range does (fusedSwiGlu);
//   - for a 2:4 sparse weight, sparse24_gemv or the sparse GEMM
//     (sparse24Kernel), which between them take every row count;
//   - otherwise cuBLASLt, which in its residual range also adds the
//     residual of the norm after the gemm (addsResidual), and reads a
//     block-quantized weight expanded to bf16 first (expandsWeight).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cuda/executor/bound_step.h"

namespace kiln::cuda {

// cuBLASLt GEMMs of at most this many rows (decode batches: shapes that
// recur) time cuBLASLt's candidate algorithms and keep the fastest; larger
// ones keep its first heuristic choice: timing them made no prefill faster.
constexpr int64_t kAutotuneMaxRows = 512;

// The skinny GEMM gemm step `s` runs at `rows` rows, or null: none of its
// skinny variants takes them.
inline const GemvKernel* skinnyKernel(const BoundStep& s, int64_t rows) {
  if (s.single.fn && s.single.rows.contains(rows)) return &s.single;
  if (s.skinny.fn && s.skinny.rows.contains(rows)) return &s.skinny;
  return nullptr;
}

inline bool fusedSwiGlu(const BoundStep& s, int64_t rows) { return s.swiglu_fn && s.swiglu_rows.contains(rows); }

// The 2:4 sparse kernel gemm step `s` runs at `rows` rows (its sparse_gemv
// or its sparse_gemm), or null: a dense gemm.
inline const GemvKernel* sparse24Kernel(const BoundStep& s, int64_t rows) {
  if (s.sparse_gemv.fn && s.sparse_gemv.rows.contains(rows)) return &s.sparse_gemv;
  if (s.sparse_gemm.fn && s.sparse_gemm.rows.contains(rows)) return &s.sparse_gemm;
  return nullptr;
}

// Whether cuBLASLt runs gemm step `s` at `rows` rows.
inline bool onCublas(const BoundStep& s, int64_t rows) {
  return !skinnyKernel(s, rows) && !fusedSwiGlu(s, rows) && !sparse24Kernel(s, rows);
}

// Whether gemm step `s` at `rows` rows also adds the residual of the norm
// after it (BoundStep::sum_norm).
inline bool addsResidual(const BoundStep& s, int64_t rows) {
  return s.sum_norm >= 0 && covers(s.residual_rows, rows) && onCublas(s, rows);
}

// Whether gemm step `s` at `rows` rows first expands its block-quantized
// weight to bf16 for cuBLASLt (BoundStep::dequantize_fn).
inline bool expandsWeight(const BoundStep& s, int64_t rows) {
  return s.dequantize_fn && covers(s.dequantize_rows, rows) && onCublas(s, rows);
}

// Whether step i, folded into the gemm before it (silu_mul,
// rope_kv_append), was done there at `rows` rows: by the skinny fused
// variant, or by gemm_swiglu_wgmma. Nothing of its own runs.
inline bool doneByGemmBefore(const std::vector<BoundStep>& steps, size_t i, int64_t rows) {
  return covers(steps[i].absorbed_rows, rows) || covers(steps[i].absorbed_prefill_rows, rows);
}

// Whether residual_rms_norm step i gets its sum from the gemm before it at
// `rows` rows and only normalizes it.
inline bool sumFromGemmBefore(const std::vector<BoundStep>& steps, size_t i, int64_t rows) {
  return covers(steps[i].norm_of_sum_rows, rows) && addsResidual(steps[i - 1], rows);
}

// Whether residual_rms_norm step i is done by the gemm after it at `rows` rows.
inline bool doneByGemmAfter(const BoundStep& s, int64_t rows) { return covers(s.folded_rows, rows); }

}  // namespace kiln::cuda
