#include "models/quantize/int4_grid.h"

#include <algorithm>
#include <cmath>

#include "runtime/numerics/quant.h"

namespace kiln::quantize {
namespace {

double toF16(double x) { return f16ToF32(f32ToF16(float(x))); }

}  // namespace

Int4Group int4GroupFor(const double* w, int64_t n, bool sym) {
  double lo = 0.0, hi = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, w[i]);
    hi = std::max(hi, w[i]);
  }
  Int4Group g;
  if (sym) {
    g.scale = toF16(std::max(-lo, hi) / 7.0);
    g.zero = 8;
    return g;
  }
  g.scale = toF16((hi - lo) / 15.0);
  g.zero = g.scale == 0.0 ? 0 : int(std::clamp(std::nearbyint(-lo / g.scale), 0.0, 15.0));
  return g;
}

formats::Int4Linear makeInt4Linear(int64_t rows, int64_t cols, int64_t group) {
  formats::Int4Linear layer;
  layer.out_features = rows;
  layer.in_features = cols;
  layer.groups = cols / group;
  layer.codes.assign(size_t(rows * cols), 0);
  layer.zeros.assign(size_t(layer.groups * rows), 0);
  layer.scales.assign(size_t(layer.groups * rows), 0);
  layer.group_of_column.resize(size_t(cols));
  for (int64_t i = 0; i < cols; ++i) layer.group_of_column[size_t(i)] = int32_t(i / group);
  return layer;
}

void setInt4Group(formats::Int4Linear& layer, int64_t r, int64_t g, Int4Group params) {
  const size_t at = size_t(g * layer.out_features + r);
  layer.scales[at] = f32ToF16(float(params.scale));
  layer.zeros[at] = uint8_t(params.zero);
}

Int4Group int4GroupOf(const formats::Int4Linear& layer, int64_t r, int64_t g) {
  const size_t at = size_t(g * layer.out_features + r);
  return {f16ToF32(layer.scales[at]), int(layer.zeros[at])};
}

formats::Int4Linear int4Rows(const formats::Int4Linear& layer, int64_t begin, int64_t count) {
  formats::Int4Linear out = layer;
  out.out_features = count;
  const int64_t cols = layer.in_features, rows = layer.out_features;
  out.codes.assign(layer.codes.begin() + begin * cols, layer.codes.begin() + (begin + count) * cols);
  out.zeros.resize(size_t(layer.groups * count));
  out.scales.resize(size_t(layer.groups * count));
  for (int64_t g = 0; g < layer.groups; ++g)
    for (int64_t r = 0; r < count; ++r) {
      out.zeros[size_t(g * count + r)] = layer.zeros[size_t(g * rows + begin + r)];
      out.scales[size_t(g * count + r)] = layer.scales[size_t(g * rows + begin + r)];
    }
  return out;
}

formats::Int4Linear int4Rtn(const double* w, int64_t rows, int64_t cols, const Int4Options& options) {
  formats::Int4Linear layer = makeInt4Linear(rows, cols, options.group);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < cols / options.group; ++g) {
      const double* x = w + r * cols + g * options.group;
      const Int4Group params = int4GroupFor(x, options.group, options.sym);
      setInt4Group(layer, r, g, params);
      for (int64_t i = 0; i < options.group; ++i)
        layer.codes[size_t(r * cols + g * options.group + i)] = uint8_t(int4Code(x[i], params));
    }
  return layer;
}

void int4RtnValues(const double* w, int64_t rows, int64_t cols, const Int4Options& options,
                   double* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < cols / options.group; ++g) {
      const double* x = w + r * cols + g * options.group;
      double* y = out + r * cols + g * options.group;
      const Int4Group params = int4GroupFor(x, options.group, options.sym);
      for (int64_t i = 0; i < options.group; ++i) y[i] = int4Value(int4Code(x[i], params), params);
    }
}

}  // namespace kiln::quantize
