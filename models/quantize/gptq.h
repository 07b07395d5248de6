// GPTQ (Frantar et al., 2022) for one linear layer: the columns of W
// [rows, cols] are quantized one at a time onto the 4-bit grid (int4_grid.h),
// and each column's error is spread over the columns not yet quantized so
// that the layer's output error over the calibration inputs stays small,
// using the inverse of H = X^T X (the inputs' Gram matrix):
//   H += damp * mean(diag H) * I;  U = cholesky_upper(H^-1)
//   for each column j:  q_j = Q(w_j);  e = (w_j - q_j) / U[j, j];
//                       w_{j+1..} -= e * U[j, j+1..]
// in blocks of columns whose updates to later blocks are batched into one
// GEMM (the "lazy batch" of the paper; column_sweep.h, which SparseGPT
// shares). Columns with diag H = 0 (never
// active) are set to 0. A group's grid is taken from its columns' values
// when the first of them is reached (they carry the error of the columns
// before). Act-order visits columns by decreasing diag H; its groups stay
// the contiguous column ranges of the original order, with grids taken from
// the weights before any update ("static groups"), so the result still packs
// into q4_0/q4_1 blocks. The arithmetic is double; a row's result depends
// only on its own weights and H, so rows run in parallel.
#pragma once

#include <cstdint>

#include "models/formats/int4_linear.h"
#include "models/quantize/int4_grid.h"
#include "runtime/support/error.h"

namespace kiln::quantize {

struct GptqOptions {
  Int4Options grid;
  double damp = 0.01;      // of mean(diag H), added to the diagonal
  int64_t block = 128;     // columns a lazy update batches (rounded to whole groups)
  bool act_order = false;
};

// w: [rows, cols] f32; h: [cols, cols] (X^T X over the calibration tokens, any
// positive scale; InputStatistics::hessian). Fails when H + damp is not
// positive definite (the Cholesky factorization's pivot is named).
Result<formats::Int4Linear> gptqQuantize(const float* w, int64_t rows, int64_t cols,
                                         const double* h, const GptqOptions& options);

}  // namespace kiln::quantize
