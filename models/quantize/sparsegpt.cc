#include "models/quantize/sparsegpt.h"

#include <algorithm>
#include <cmath>

#include "models/quantize/column_sweep.h"

namespace kiln::quantize {

unsigned keptOfFour(const double score[4]) {
  unsigned kept = 0;
  for (int pick = 0; pick < 2; ++pick) {
    int best = -1;
    for (int i = 0; i < 4; ++i)
      if (!(kept >> i & 1u) && (best < 0 || score[i] > score[best])) best = i;
    kept |= 1u << best;
  }
  return kept;
}

void magnitudePrune24(const double* w, int64_t rows, int64_t cols, double* out) {
  for (int64_t i = 0; i < rows * cols; i += 4) {
    const double score[4] = {std::fabs(w[i]), std::fabs(w[i + 1]), std::fabs(w[i + 2]),
                             std::fabs(w[i + 3])};
    const unsigned kept = keptOfFour(score);
    for (int c = 0; c < 4; ++c) out[i + c] = kept >> c & 1u ? w[i + c] : 0.0;
  }
}

Result<std::vector<double>> sparseGptPrune(const float* w_in, int64_t rows, int64_t cols,
                                           const double* h_in, const SparseGptOptions& options) {
  if (cols % 4 != 0) return makeError("sparsegpt: {} columns are not whole groups of 4", cols);
  const int64_t block = 4 * std::max<int64_t>(1, options.block / 4);
  std::vector<double> w(size_t(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) w[size_t(i)] = double(w_in[i]);
  std::vector<double> h(h_in, h_in + cols * cols);
  zeroDeadColumns(h, w, rows, cols);
  KILN_RETURN_IF_ERROR(dampedInverseCholesky(h, cols, options.damp));
  const std::vector<double>& u = h;

  std::vector<unsigned> kept(static_cast<size_t>(rows));  // the current group's kept columns, per row
  sweepColumns(w, rows, cols, u, block, [&](int64_t r, int64_t j, const double* wr) {
    if (j % 4 == 0) {
      double score[4];
      for (int c = 0; c < 4; ++c) {
        const double d = u[size_t((j + c) * cols + j + c)];
        score[c] = wr[j + c] * wr[j + c] / (d * d);
      }
      kept[size_t(r)] = keptOfFour(score);
    }
    return kept[size_t(r)] >> (j % 4) & 1u ? wr[j] : 0.0;
  });
  return w;
}

}  // namespace kiln::quantize
