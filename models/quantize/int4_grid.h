// The 4-bit grid kiln's weight quantizers (RTN, GPTQ, AWQ) share. One output
// row's group of G consecutive input columns holds
//   value = scale * (q - zero),   q in 0..15
// with scale an f16 (rounded, through f32, before any code is chosen, so the
// value a method optimizes is the value the model runs):
//   symmetric   scale = max|w| / 7,            zero = 8     -> q4_0 blocks
//   asymmetric  scale = (hi - lo) / 15,        zero = round(-lo / scale)
//               lo = min(w, 0), hi = max(w, 0)             -> q4_1 blocks
// q = clamp(round(w / scale) + zero, 0, 15), rounding half to even; a group
// whose scale rounds to 0 holds zeros. Results are formats::Int4Linear, the
// form GPTQ and AWQ checkpoints unpack into, which packs into q4_0/q4_1
// blocks (packInt4For) or GPTQ tensors (packGptq).
#pragma once

#include <cstdint>

#include "models/formats/int4_linear.h"

namespace kiln::quantize {

struct Int4Options {
  int64_t group = 128;  // input columns per scale; a multiple of 32 dividing the row
  bool sym = true;
};

struct Int4Group {
  double scale = 0.0;  // an f16 value
  int zero = 8;
};

// The grid for the n values w[0..n).
Int4Group int4GroupFor(const double* w, int64_t n, bool sym);
inline int int4Code(double w, Int4Group g) {
  if (g.scale == 0.0) return g.zero;
  const double q = __builtin_nearbyint(w / g.scale) + g.zero;
  return q < 0 ? 0 : q > 15 ? 15 : int(q);
}
inline double int4Value(int q, Int4Group g) { return g.scale * double(q - g.zero); }

// An Int4Linear of [rows, cols] with contiguous groups of `group` columns,
// codes, zeros and scales zero.
formats::Int4Linear makeInt4Linear(int64_t rows, int64_t cols, int64_t group);
// Records group g of row r.
void setInt4Group(formats::Int4Linear& layer, int64_t r, int64_t g, Int4Group params);
Int4Group int4GroupOf(const formats::Int4Linear& layer, int64_t r, int64_t g);
// Rows [begin, begin + count) of `layer` (one checkpoint tensor of a merged
// QKV or gate-up weight).
formats::Int4Linear int4Rows(const formats::Int4Linear& layer, int64_t begin, int64_t count);

// Round to nearest: every group's grid from its own values. w: [rows, cols]
// row-major.
formats::Int4Linear int4Rtn(const double* w, int64_t rows, int64_t cols, const Int4Options& options);
// The values int4Rtn would give, written to out [rows, cols] (may be w).
void int4RtnValues(const double* w, int64_t rows, int64_t cols, const Int4Options& options,
                   double* out);

}  // namespace kiln::quantize
