#include "models/quantize/gptq.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "models/quantize/column_sweep.h"

namespace kiln::quantize {

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
  zeroDeadColumns(h, w, rows, cols);

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

  KILN_RETURN_IF_ERROR(dampedInverseCholesky(h, cols, options.damp));
  // A group's grid is taken at its first column, which the lazy blocks of
  // whole groups keep up to date.
  sweepColumns(w, rows, cols, h, block, [&](int64_t r, int64_t j, const double* wr) {
    const int64_t g = perm[size_t(j)] / group;
    if (!options.act_order && j % group == 0)
      setInt4Group(layer, r, g, int4GroupFor(wr + j, group, options.grid.sym));
    const Int4Group params = int4GroupOf(layer, r, g);
    const int q = int4Code(wr[j], params);
    layer.codes[size_t(r * cols + perm[size_t(j)])] = uint8_t(q);
    return int4Value(q, params);
  });
  return layer;
}

}  // namespace kiln::quantize
