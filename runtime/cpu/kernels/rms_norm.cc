#include "runtime/cpu/kernels/rms_norm.h"

#include <cmath>

#include "runtime/support/thread_pool.h"

namespace kiln::cpu {

Status rmsNormResidual(const float* x, float* residual, const float* weight, float eps,
                       int64_t tokens, int64_t hidden, float* out) {
  if (tokens < 0 || hidden <= 0)
    return makeError("rms_norm: shape tokens={} hidden={} is invalid", tokens, hidden);
  if (!(eps >= 0.0f)) return makeError("rms_norm: eps {} is invalid: expected >= 0", eps);
  parallelFor(tokens, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* xr = x + t * hidden;
      const float* src = xr;
      if (residual) {
        float* rr = residual + t * hidden;
        for (int64_t i = 0; i < hidden; ++i) rr[i] += xr[i];
        src = rr;
      }
      // ggml's rms_norm, rounding step by step as it does: squares in f32,
      // summed in f64; the mean, 1/sqrt and the scaling in f32; the weight
      // applied afterwards (a separate MUL in llama.cpp's graph). A scale one
      // ulp off moves some outputs by an ulp, which flips the 8-bit rounding
      // of the next GEMM's activations (see docs/design/cpu-numerics.md).
      double sum_sq = 0.0;
      for (int64_t i = 0; i < hidden; ++i) sum_sq += double(src[i] * src[i]);
      const float mean = float(sum_sq / double(hidden));
      const float scale = 1.0f / std::sqrt(mean + eps);
      float* o = out + t * hidden;
      for (int64_t i = 0; i < hidden; ++i) o[i] = (src[i] * scale) * weight[i];
    }
  });
  return Status::success();
}

}  // namespace kiln::cpu
