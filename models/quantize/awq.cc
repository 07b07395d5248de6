#include "models/quantize/awq.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "runtime/support/thread_pool.h"

namespace kiln::quantize {
namespace {

// Per row r of d [n, k]: d_r H d_r^T, with dh [n, k] as scratch.
void rowErrors(const double* d, int64_t n, int64_t k, const double* h, int64_t ldh, double* dh,
               double* out) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(k), int(k), 1.0, d, int(k), h,
              int(ldh), 0.0, dh, int(k));
  for (int64_t r = 0; r < n; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < k; ++c) sum += d[r * k + c] * dh[r * k + c];
    out[r] = sum;
  }
}

}  // namespace

AwqScales awqSearchScales(const double* w, int64_t rows, int64_t cols, const double* h,
                          const double* x_mean, const AwqOptions& options) {
  AwqScales best;
  best.loss = std::numeric_limits<double>::infinity();
  std::vector<double> s(static_cast<size_t>(cols)), row_loss(static_cast<size_t>(rows));
  for (int i = 0; i < options.grid_points; ++i) {
    const double alpha = double(i) / double(options.grid_points);
    for (int64_t c = 0; c < cols; ++c) s[size_t(c)] = std::max(std::pow(x_mean[c], alpha), 1e-4);
    const auto [lo, hi] = std::minmax_element(s.begin(), s.end());
    const double norm = std::sqrt(*lo * *hi);
    for (double& v : s) v /= norm;
    kernelThreadPool().parallelFor(rows, 32, [&](int64_t r0, int64_t r1) {
      const int64_t n = r1 - r0;
      std::vector<double> d(size_t(n * cols)), dh(size_t(n * cols));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < cols; ++c)
          d[size_t(r * cols + c)] = w[(r0 + r) * cols + c] * s[size_t(c)];
      int4RtnValues(d.data(), n, cols, options.grid, d.data());
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          double& v = d[size_t(r * cols + c)];
          v = w[(r0 + r) * cols + c] - v / s[size_t(c)];
        }
      rowErrors(d.data(), n, cols, h, cols, dh.data(), &row_loss[size_t(r0)]);
    });
    const double loss = std::accumulate(row_loss.begin(), row_loss.end(), 0.0);
    if (i == 0) best.rtn_loss = loss;
    if (loss < best.loss) {
      best.loss = loss;
      best.alpha = alpha;
      best.scales = s;
    }
  }
  return best;
}

std::vector<double> scaledHessian(const double* h, int64_t cols, const std::vector<double>& s) {
  std::vector<double> out(size_t(cols * cols));
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t j = 0; j < cols; ++j)
      out[size_t(i * cols + j)] = h[i * cols + j] / (s[size_t(i)] * s[size_t(j)]);
  return out;
}

double awqClip(double* w, int64_t rows, int64_t cols, const double* h, const AwqOptions& options) {
  const int64_t group = options.grid.group;
  const int steps = int(options.max_shrink * options.grid_points);
  std::vector<double> group_error(size_t(rows), 0.0);
  kernelThreadPool().parallelFor(rows, 32, [&](int64_t r0, int64_t r1) {
    const int64_t n = r1 - r0;
    const size_t rows_here = static_cast<size_t>(n);
    std::vector<double> d(rows_here * size_t(group)), dh(rows_here * size_t(group));
    std::vector<double> clipped(static_cast<size_t>(group));
    std::vector<double> err(rows_here), best(rows_here), best_m(rows_here), m0(rows_here);
    for (int64_t g = 0; g < cols / group; ++g) {
      const double* hg = h + g * group * cols + g * group;  // H's diagonal block, ld = cols
      for (int64_t r = 0; r < n; ++r) {
        const double* x = w + (r0 + r) * cols + g * group;
        double m = 0.0;
        for (int64_t i = 0; i < group; ++i) m = std::max(m, std::fabs(x[i]));
        m0[size_t(r)] = best_m[size_t(r)] = m;
        best[size_t(r)] = std::numeric_limits<double>::infinity();
      }
      for (int step = 0; step < steps; ++step) {
        for (int64_t r = 0; r < n; ++r) {
          const double* x = w + (r0 + r) * cols + g * group;
          const double m = m0[size_t(r)] * (1.0 - double(step) / double(options.grid_points));
          for (int64_t i = 0; i < group; ++i) clipped[size_t(i)] = std::clamp(x[i], -m, m);
          const Int4Group params = int4GroupFor(clipped.data(), group, options.grid.sym);
          for (int64_t i = 0; i < group; ++i)
            d[size_t(r * group + i)] = x[i] - int4Value(int4Code(clipped[size_t(i)], params), params);
        }
        rowErrors(d.data(), n, group, hg, cols, dh.data(), err.data());
        for (int64_t r = 0; r < n; ++r)
          if (err[size_t(r)] < best[size_t(r)]) {
            best[size_t(r)] = err[size_t(r)];
            best_m[size_t(r)] = m0[size_t(r)] * (1.0 - double(step) / double(options.grid_points));
          }
      }
      for (int64_t r = 0; r < n; ++r) {
        double* x = w + (r0 + r) * cols + g * group;
        const double m = best_m[size_t(r)];
        for (int64_t i = 0; i < group; ++i) x[i] = std::clamp(x[i], -m, m);
        group_error[size_t(r0 + r)] += best[size_t(r)];
      }
    }
  });
  return std::accumulate(group_error.begin(), group_error.end(), 0.0);
}

}  // namespace kiln::quantize
