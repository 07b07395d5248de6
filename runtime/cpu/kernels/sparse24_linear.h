// Dense layer y = x · Wᵀ (+ bias) for a 2:4 sparse W (the layout of
// runtime/numerics/sparse24_layout.h), the CPU backend's reference for
// sparse linears: tiles of W rows are expanded to f32 (the kept values
// dequantized from f32, q8_0 or q4_0 blocks and put back at their columns,
// zeros elsewhere) and multiplied with sgemm, so the result is the dense
// product of the pruned weight up to f32 rounding. The CPU saves the
// weight's memory, not its arithmetic; the sparse tensor cores are the GPU's.
#pragma once

#include <cstdint>

#include "runtime/numerics/weight_type.h"
#include "runtime/support/error.h"

namespace kiln::cpu {

// x: [tokens, k] f32; values: [n, k/2] kept values stored as values_type
// (f32, q8_0 or q4_0); meta: n * k/32 uint32 (any alignment); bias [n] or
// null; y: [tokens, n] f32, not aliasing x. k must be a multiple of 64.
Status sparse24Linear(const float* x, int64_t tokens, int64_t k, const void* values, WeightType values_type,
                      const void* meta, int64_t n, const float* bias, float* y);

}  // namespace kiln::cpu
