// Which kernel runs a gemm step at a batch's row count, and so which steps
// folded into it are done there. The row thresholds, in one place:
//   - rows <= kGemvMaxRows: a skinny kernel (skinnyKernel), its fused
//     variant where neighbours fold in, for one row its single-row instance;
//     an f32 plan's gemm has none and runs on cuBLASLt;
//   - rows >= kFusedSwiGluMinRows with SwiGLU folded in: gemm_swiglu_wgmma;
//   - otherwise cuBLASLt, which up to kAutotuneMaxRows also adds the
//     residual of the norm after the gemm (addsResidual).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cuda/executor/bound_step.h"

namespace kiln::cuda {

constexpr int kGemvMaxRows = 8;

// cuBLASLt GEMMs of at most this many rows (decode batches: shapes that
// recur) time cuBLASLt's candidate algorithms and keep the fastest; larger
// ones keep its first heuristic choice: timing them made no prefill faster.
constexpr int64_t kAutotuneMaxRows = 512;

// Batches of at least this many rows run a gemm with SwiGLU folded in as
// gemm_swiglu_wgmma where the step has it, not cuBLASLt and silu_mul: about
// as fast from here up, and closer to float (gate/up never rounded to bf16).
constexpr int64_t kFusedSwiGluMinRows = 1024;

// The skinny GEMM a gemm step runs for `rows` <= kGemvMaxRows rows: its
// fused variant where it has one, for one row the single-row instance. No
// fn: the step has none (an f32 plan's gemm), cuBLASLt runs it.
inline const GemvKernel& skinnyKernel(const BoundStep& s, int64_t rows) {
  if (s.fused.fn) return rows == 1 && s.fused_single.fn ? s.fused_single : s.fused;
  return rows == 1 && s.gemv_single.fn ? s.gemv_single : s.gemv;
}

inline bool fusedSwiGlu(const BoundStep& s, int64_t rows) { return s.swiglu_fn && rows >= kFusedSwiGluMinRows; }

// Whether cuBLASLt runs gemm step `s` at `rows` rows (else a skinny kernel).
inline bool onCublas(const BoundStep& s, int64_t rows) { return rows > kGemvMaxRows || !skinnyKernel(s, rows).fn; }

// Whether gemm step `s` at `rows` rows also adds the residual of the norm
// after it (BoundStep::sum_norm): only in the decode-sized batches whose
// cuBLASLt algorithm is measured (kAutotuneMaxRows); at prefill sizes
// cuBLASLt with f32 C and D costs more than the norm saves.
inline bool addsResidual(const BoundStep& s, int64_t rows) {
  return s.sum_norm >= 0 && rows <= kAutotuneMaxRows && onCublas(s, rows);
}

// Whether step i, folded into the gemm before it (BoundStep::absorbed:
// silu_mul, rope_kv_append), was done there at `rows` rows: by the skinny
// fused variant, or by gemm_swiglu_wgmma. Nothing of its own runs.
inline bool doneByGemmBefore(const std::vector<BoundStep>& steps, size_t i, int64_t rows) {
  return steps[i].absorbed && (rows <= kGemvMaxRows || fusedSwiGlu(steps[i - 1], rows));
}

// Whether residual_rms_norm step i gets its sum from the gemm before it at
// `rows` rows (BoundStep::sum_from_gemm) and only normalizes it.
inline bool sumFromGemmBefore(const std::vector<BoundStep>& steps, size_t i, int64_t rows) {
  return steps[i].sum_from_gemm && addsResidual(steps[i - 1], rows);
}

}  // namespace kiln::cuda
