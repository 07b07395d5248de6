#include "models/quantize/column_sweep.h"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>

#include "runtime/support/thread_pool.h"

namespace kiln::quantize {

void zeroDeadColumns(std::vector<double>& h, std::vector<double>& w, int64_t rows, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c)
    if (h[size_t(c * cols + c)] == 0.0) {
      h[size_t(c * cols + c)] = 1.0;
      for (int64_t r = 0; r < rows; ++r) w[size_t(r * cols + c)] = 0.0;
    }
}

// Cholesky of H, its inverse, and the inverse's upper Cholesky factor, as
// GPTQ's reference computes it.
Status dampedInverseCholesky(std::vector<double>& h, int64_t n, double damp) {
  double mean_diag = 0.0;
  for (int64_t c = 0; c < n; ++c) mean_diag += h[size_t(c * n + c)];
  mean_diag /= double(n);
  for (int64_t c = 0; c < n; ++c) h[size_t(c * n + c)] += damp * mean_diag;
  const int N = int(n);
  if (int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', N, h.data(), N); info != 0)
    return makeError("the calibration Hessian is not positive definite after dampening (Cholesky "
                     "pivot {} of {}): too few or degenerate calibration tokens",
                     info, n);
  if (int info = LAPACKE_dpotri(LAPACK_ROW_MAJOR, 'L', N, h.data(), N); info != 0)
    return makeError("the calibration Hessian is singular (pivot {} of {})", info, n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < i; ++j) h[size_t(j * n + i)] = h[size_t(i * n + j)];
  if (int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'U', N, h.data(), N); info != 0)
    return makeError("the inverse calibration Hessian is not positive definite (pivot {} of {})",
                     info, n);
  return {};
}

void sweepColumns(std::vector<double>& w, int64_t rows, int64_t cols, const std::vector<double>& u,
                  int64_t block, const ColumnTarget& target) {
  // Rows [r0, r1), block by block.
  auto sweep = [&](int64_t r0, int64_t r1) {
    const int64_t n = r1 - r0;
    std::vector<double> err(size_t(n * block));
    for (int64_t i1 = 0; i1 < cols; i1 += block) {
      const int64_t i2 = std::min(cols, i1 + block), count = i2 - i1;
      for (int64_t j = i1; j < i2; ++j) {
        const double* uj = &u[size_t(j * cols)];
        for (int64_t r = r0; r < r1; ++r) {
          double* wr = &w[size_t(r * cols)];
          const double q = target(r, j, wr);
          const double e = (wr[j] - q) / uj[j];
          wr[j] = q;
          for (int64_t c = j + 1; c < i2; ++c) wr[c] -= e * uj[c];
          err[size_t((r - r0) * block + (j - i1))] = e;
        }
      }
      if (i2 < cols)  // w[:, i2:] -= err · U[i1:i2, i2:]
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(cols - i2), int(count),
                    -1.0, err.data(), int(block), &u[size_t(i1 * cols + i2)], int(cols), 1.0,
                    &w[size_t(r0 * cols + i2)], int(cols));
    }
  };
  kernelThreadPool().parallelFor(rows, 16, sweep);
}

}  // namespace kiln::quantize
