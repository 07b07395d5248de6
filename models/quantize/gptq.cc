#include "models/quantize/gptq.h"

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "runtime/support/thread_pool.h"

namespace kiln::quantize {
namespace {

// U with H^-1 = U^T U, [n, n] row-major (upper triangle; the lower is left
// as is): Cholesky of H, its inverse, and the inverse's upper Cholesky
// factor, as GPTQ's reference computes it.
Status inverseCholeskyUpper(std::vector<double>& h, int64_t n) {
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

}  // namespace

Result<formats::Int4Linear> gptqQuantize(const float* w_in, int64_t rows, int64_t cols,
                                         const double* h_in, const GptqOptions& options) {
  const int64_t group = options.grid.group;
  if (group <= 0 || cols % group != 0)
    return makeError("gptq: group {} does not divide the {} columns", group, cols);
  const int64_t block = group * std::max<int64_t>(1, options.block / group);
  const int64_t groups = cols / group;

  std::vector<double> w(size_t(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) w[size_t(i)] = double(w_in[i]);
  std::vector<double> h(h_in, h_in + cols * cols);
  for (int64_t c = 0; c < cols; ++c)
    if (h[size_t(c * cols + c)] == 0.0) {
      h[size_t(c * cols + c)] = 1.0;
      for (int64_t r = 0; r < rows; ++r) w[size_t(r * cols + c)] = 0.0;
    }

  formats::Int4Linear layer = makeInt4Linear(rows, cols, group);
  std::vector<int64_t> perm(static_cast<size_t>(cols));
  std::iota(perm.begin(), perm.end(), 0);
  if (options.act_order) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < groups; ++g)
        setInt4Group(layer, r, g,
                     int4GroupFor(&w[size_t(r * cols + g * group)], group, options.grid.sym));
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
      return h[size_t(a * cols + a)] > h[size_t(b * cols + b)];
    });
    std::vector<double> wp(w.size()), hp(h.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j)
        wp[size_t(r * cols + j)] = w[size_t(r * cols + perm[size_t(j)])];
    for (int64_t i = 0; i < cols; ++i)
      for (int64_t j = 0; j < cols; ++j)
        hp[size_t(i * cols + j)] = h[size_t(perm[size_t(i)] * cols + perm[size_t(j)])];
    w.swap(wp);
    h.swap(hp);
  }

  double mean_diag = 0.0;
  for (int64_t c = 0; c < cols; ++c) mean_diag += h[size_t(c * cols + c)];
  mean_diag /= double(cols);
  for (int64_t c = 0; c < cols; ++c) h[size_t(c * cols + c)] += options.damp * mean_diag;
  KILN_RETURN_IF_ERROR(inverseCholeskyUpper(h, cols));
  const std::vector<double>& u = h;

  // Rows [r0, r1): the column sweep, block by block.
  auto sweep = [&](int64_t r0, int64_t r1) {
    const int64_t n = r1 - r0;
    std::vector<double> err(size_t(n * block));
    for (int64_t i1 = 0; i1 < cols; i1 += block) {
      const int64_t i2 = std::min(cols, i1 + block), count = i2 - i1;
      for (int64_t j = i1; j < i2; ++j) {
        const int64_t g = perm[size_t(j)] / group;
        const double* uj = &u[size_t(j * cols)];
        for (int64_t r = r0; r < r1; ++r) {
          double* wr = &w[size_t(r * cols)];
          if (!options.act_order && j % group == 0)
            setInt4Group(layer, r, g, int4GroupFor(wr + j, group, options.grid.sym));
          const Int4Group params = int4GroupOf(layer, r, g);
          const int q = int4Code(wr[j], params);
          layer.codes[size_t(r * cols + perm[size_t(j)])] = uint8_t(q);
          const double e = (wr[j] - int4Value(q, params)) / uj[j];
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
  return layer;
}

}  // namespace kiln::quantize
