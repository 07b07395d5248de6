#include "runtime/cpu/kernels/elementwise.h"

#include <cmath>

#include "runtime/cpu/kernels/ggml_vec.h"
#include "runtime/support/thread_pool.h"

namespace kiln::cpu {

Status siluMul(const float* gate_up, int64_t tokens, int64_t ffn, float* out) {
  return siluMulSplit(gate_up, gate_up + ffn, 2 * ffn, tokens, ffn, out);
}

Status siluMulSplit(const float* gate, const float* up, int64_t stride, int64_t tokens,
                    int64_t ffn, float* out) {
  if (tokens < 0 || ffn <= 0)
    return makeError("silu_mul: shape tokens={} ffn={} is invalid", tokens, ffn);
  parallelFor(tokens, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      ggmlVec().swiglu(out + t * ffn, gate + t * stride, up + t * stride, ffn);
    }
  });
  return Status::success();
}

Status geluTanhMulSplit(const float* gate, const float* up, int64_t stride, int64_t tokens,
                        int64_t ffn, float* out) {
  if (tokens < 0 || ffn <= 0)
    return makeError("gelu_tanh_mul: shape tokens={} ffn={} is invalid", tokens, ffn);
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  parallelFor(tokens, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* g = gate + t * stride;
      const float* u = up + t * stride;
      float* o = out + t * ffn;
      for (int64_t i = 0; i < ffn; ++i) {
        const float x = g[i];
        const float inner = kSqrt2OverPi * (x + 0.044715f * x * x * x);
        o[i] = 0.5f * x * (1.0f + std::tanh(inner)) * u[i];
      }
    }
  });
  return Status::success();
}

void silu(const float* x, float* out, int64_t n) { ggmlVec().silu(out, x, n); }

void add(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void softmaxRow(const float* x, float* out, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = std::exp(x[i] - max);
    sum += out[i];
  }
  const float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) out[i] *= inv;
}

}  // namespace kiln::cpu
