// RMSNorm with the residual add fused in front, as in pre-norm transformer
// blocks: the residual stream is updated and normalized in one pass over it.
#pragma once

#include <cstdint>

#include "runtime/support/error.h"

namespace kiln::cpu {

// x:        [tokens, hidden] f32
// residual: [tokens, hidden] f32 in/out, or null
// weight:   [hidden] f32
// out:      [tokens, hidden] f32 (may alias x; must not alias residual)
// With residual:    residual += x; out = residual / rms(residual) * weight
// Without residual: out = x / rms(x) * weight
// rms(v) = sqrt(mean(v^2) + eps), rounded as ggml rounds it (f32 squares
// summed in f64, f32 mean and scale), so outputs are bit-identical to
// llama.cpp's RMS_NORM followed by MUL.
Status rmsNormResidual(const float* x, float* residual, const float* weight, float eps,
                       int64_t tokens, int64_t hidden, float* out);

}  // namespace kiln::cpu
