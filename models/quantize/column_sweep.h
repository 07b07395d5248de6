// The column sweep GPTQ (Frantar et al., 2022) and SparseGPT (Frantar and
// Alistarh, 2023) share: the columns of W [rows, cols] are replaced one at a
// time by what the method makes of them, and each column's change is spread
// over the columns not yet visited so that the layer's output over the
// calibration inputs moves as little as possible, through the inverse of
// H = X^T X (the inputs' Gram matrix):
//   H += damp * mean(diag H) * I;  U = cholesky_upper(H^-1)
//   for each column j:  q_j = target(w_j);  e = (w_j - q_j) / U[j, j];
//                       w_{j+1..} -= e * U[j, j+1..]
// in blocks of columns whose updates to later blocks are batched into one
// GEMM (the paper's "lazy batch"). The arithmetic is double; a row's result
// depends only on its own weights and H, so rows run in parallel.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/support/error.h"

namespace kiln::quantize {

// Columns never active (diag H = 0): their diagonal set to 1 and their
// weights in w [rows, cols] to 0, so H can be factored and nothing is spread
// into them.
void zeroDeadColumns(std::vector<double>& h, std::vector<double>& w, int64_t rows, int64_t cols);

// h [cols, cols] replaced by U (upper triangle, row-major; the lower is left
// as is) with (H + damp * mean(diag H) * I)^-1 = U^T U. Fails, naming the
// Cholesky pivot, when the dampened H is not positive definite.
Status dampedInverseCholesky(std::vector<double>& h, int64_t cols, double damp);

// What column `col` of row `row` becomes, given the row's weights wr [cols]
// as the sweep has updated them: column col and the rest of its lazy block
// carry the error of every column before col (a method that looks ahead,
// at a group's first column, must use blocks of whole groups). Called for a
// row from one thread at a time.
using ColumnTarget = std::function<double(int64_t row, int64_t col, const double* wr)>;

// The sweep over w [rows, cols] with u from dampedInverseCholesky, `block`
// columns to a lazy update. Afterwards w holds the targets.
void sweepColumns(std::vector<double>& w, int64_t rows, int64_t cols, const std::vector<double>& u,
                  int64_t block, const ColumnTarget& target);

}  // namespace kiln::quantize
