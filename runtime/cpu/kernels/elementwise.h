// Small row-wise kernels: the SwiGLU gate, residual adds and a softmax row
// (logits for sampling and tests).
#pragma once

#include <cstdint>

#include "runtime/support/error.h"

namespace kiln::cpu {

// gate_up: [tokens, 2 * ffn] f32, gate in columns [0, ffn), up in [ffn, 2 ffn)
//          (the merged gate/up GEMM's output)
// out:     [tokens, ffn] f32, out = silu(gate) * up, silu(g) = g / (1 + e^-g)
// Rounded as ggml's SWIGLU (its vectorized expf; ggml_vec.h).
Status siluMul(const float* gate_up, int64_t tokens, int64_t ffn, float* out);
// The same with gate and up in separate rows: gate, up: [tokens, ffn] rows
// `stride` floats apart.
Status siluMulSplit(const float* gate, const float* up, int64_t stride, int64_t tokens,
                    int64_t ffn, float* out);

// The same with GeGLU: out = gelu_tanh(gate) * up, PyTorch's
// gelu(approximate="tanh") g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g³)))
// in f32 (gemma3's gelu_pytorch_tanh).
Status geluTanhMulSplit(const float* gate, const float* up, int64_t stride, int64_t tokens,
                        int64_t ffn, float* out);

// x, out: [n] f32, out = silu(x) as ggml's SILU rounds it; out may alias x.
void silu(const float* x, float* out, int64_t n);

// a, b, out: [n] f32; out may alias a or b.
void add(const float* a, const float* b, float* out, int64_t n);

// x, out: [n] f32; out = exp(x - max) / sum. out may alias x. n > 0.
// Rows of all -inf produce NaN (there is no distribution to return).
void softmaxRow(const float* x, float* out, int64_t n);

}  // namespace kiln::cpu
