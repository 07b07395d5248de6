// SparseGPT (Frantar and Alistarh, 2023) for the 2:4 pattern, one linear
// layer at a time: in every group of four consecutive input columns of a row
// two weights are set to zero, and each zeroed weight's error is spread over
// the columns not yet visited (column_sweep.h, GPTQ's sweep) so that the
// layer's output over the calibration inputs stays close to the dense one's:
//   H += damp * mean(diag H) * I;  U = cholesky_upper(H^-1)
//   at each column j with j % 4 == 0, per row: of columns j..j+3 keep the two
//     with the largest w^2 / U[c, c]^2 (w as the sweep has updated it; ties
//     keep the lower column), prune the other two
//   for each column j:  q_j = pruned ? 0 : w_j;  e = (w_j - q_j) / U[j, j];
//                       w_{j+1..} -= e * U[j, j+1..]
// Lazy blocks are whole groups of four, so a group's four columns carry the
// error of every column before it when its mask is chosen. Columns with
// diag H = 0 (never active) are zero, and so pruned first. Double
// precision; rows in parallel.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/support/error.h"

namespace kiln::quantize {

// The 2:4 layout's rows are whole 64-column blocks (docs/design/sparsity.md):
// a linear with other input features stays dense.
constexpr int64_t kSparseColumnMultiple = 64;

struct SparseGptOptions {
  double damp = 0.01;   // of mean(diag H), added to the diagonal
  int64_t block = 128;  // columns a lazy update batches (rounded to whole groups of 4)
};

// w: [rows, cols] f32, cols a multiple of 4; h: [cols, cols] (X^T X over the
// calibration tokens, any positive scale; InputStatistics::hessian). The
// pruned weights [rows, cols], at most two nonzero in every group of four.
// Fails when H + damp is not positive definite.
Result<std::vector<double>> sparseGptPrune(const float* w, int64_t rows, int64_t cols,
                                           const double* h, const SparseGptOptions& options);

// Magnitude pruning, the baseline: of every group of four the two largest
// |w| kept (ties keep the lower column), w and out [rows, cols] (out may be
// w).
void magnitudePrune24(const double* w, int64_t rows, int64_t cols, double* out);

// The columns 4g + i (i in 0..3) of a group to keep: the two largest scores,
// ties to the lower index. Bit i set for a kept column.
unsigned keptOfFour(const double score[4]);

}  // namespace kiln::quantize
