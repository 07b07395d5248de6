// AWQ (Lin et al., 2023): activation-aware scaling before 4-bit rounding.
// The input channels that carry large activations matter most, so each
// input channel c of the linears reading one input is multiplied by s_c
// (and the input divided by it, which the previous op absorbs: an RMSNorm
// weight, or the rows of the linear before):
//   s = mean|x|^alpha / sqrt(max * min),  alpha in {0, 1/n, ..., (n-1)/n}
// choosing the alpha whose quantized layer  Q(W diag s) diag(1/s)  has the
// least output error over the calibration inputs. alpha = 0 is plain
// rounding, so the result is never worse than RTN on the same grid. The
// error is measured through H = X^T X / tokens (input_statistics.h), exact
// for the layer's output, where AutoAWQ runs the module on sampled tokens.
//
// Clipping then shrinks each (row, group)'s range to m = (1 - i/n) max|w|,
// i < max_shrink * n, keeping the m whose rounded group has the least error
// on that group's own inputs (H's diagonal block); i = 0 is no clipping.
#pragma once

#include <cstdint>
#include <vector>

#include "models/quantize/int4_grid.h"

namespace kiln::quantize {

struct AwqOptions {
  Int4Options grid{.group = 128, .sym = false};
  int grid_points = 20;     // n: alphas searched, and the clip step 1/n
  bool clip = true;
  double max_shrink = 0.5;  // clipping tries ranges down to (1 - max_shrink) max|w|
};

struct AwqScales {
  std::vector<double> scales;  // s, [cols]
  double alpha = 0.0;
  double loss = 0.0;      // output error with s
  double rtn_loss = 0.0;  // with alpha = 0 (round to nearest)
};

// w: [rows, cols] (the linears sharing one input, rows stacked); h: [cols,
// cols]; x_mean: mean |x| per input channel, [cols]. Channels that must share
// a scale (o_proj's heads that read one KV head's values) are given the same
// x_mean.
AwqScales awqSearchScales(const double* w, int64_t rows, int64_t cols, const double* h,
                          const double* x_mean, const AwqOptions& options);

// H of the scaled inputs x / s: h[i, j] / (s_i s_j).
std::vector<double> scaledHessian(const double* h, int64_t cols, const std::vector<double>& s);

// Clamps every (row, group) of w [rows, cols] in place to the clipping range
// with the least error; h: the Hessian of w's inputs. Returns the summed
// group error after clipping (diagnostics).
double awqClip(double* w, int64_t rows, int64_t cols, const double* h, const AwqOptions& options);

}  // namespace kiln::quantize
