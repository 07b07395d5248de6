#include "models/quantize/input_statistics.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

namespace kiln::quantize {

InputStatistics::InputStatistics(int64_t k)
    : k_(k), gram_(size_t(k * k), 0.0), abs_sum_(size_t(k), 0.0) {}

void InputStatistics::add(const float* x, int64_t rows) {
  constexpr int64_t kBlockRows = 256;
  std::vector<double> block(size_t(std::min(rows, kBlockRows) * k_));
  for (int64_t r0 = 0; r0 < rows; r0 += kBlockRows) {
    const int64_t n = std::min(kBlockRows, rows - r0);
    for (int64_t i = 0; i < n * k_; ++i) block[size_t(i)] = double(x[r0 * k_ + i]);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k_; ++c) abs_sum_[size_t(c)] += std::fabs(block[size_t(r * k_ + c)]);
    // gram += block^T block (upper triangle)
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, int(k_), int(n), 1.0, block.data(), int(k_),
                1.0, gram_.data(), int(k_));
  }
  tokens_ += rows;
}

std::vector<double> InputStatistics::hessian() const {
  std::vector<double> h(gram_.size());
  const double inv = tokens_ > 0 ? 1.0 / double(tokens_) : 0.0;
  for (int64_t i = 0; i < k_; ++i)
    for (int64_t j = i; j < k_; ++j) {
      const double v = gram_[size_t(i * k_ + j)] * inv;
      h[size_t(i * k_ + j)] = v;
      h[size_t(j * k_ + i)] = v;
    }
  return h;
}

std::vector<double> InputStatistics::meanAbs() const {
  std::vector<double> m(abs_sum_);
  for (double& v : m) v = tokens_ > 0 ? v / double(tokens_) : 0.0;
  return m;
}

}  // namespace kiln::quantize

namespace kiln::quantize {

double outputError(const double* a, const double* b, int64_t rows, int64_t k, const double* h) {
  std::vector<double> d(size_t(rows * k)), dh(size_t(rows * k));
  for (int64_t i = 0; i < rows * k; ++i) d[size_t(i)] = a[i] - b[i];
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(k), int(k), 1.0, d.data(),
              int(k), h, int(k), 0.0, dh.data(), int(k));
  double sum = 0.0;
  for (int64_t i = 0; i < rows * k; ++i) sum += d[size_t(i)] * dh[size_t(i)];
  return sum;
}

}  // namespace kiln::quantize
