// Row-wise elementwise kernels, 8 elements per thread and step: silu_mul
// (SwiGLU) and gelu_tanh_mul (GeGLU); add, mul, silu, relu_squared with per-operand element types (an f32 residual
// stream plus a bf16 branch output -> f32); gather_last_tokens copying rows
// of Config::T.
//
//   silu_mul: gate_up [rows, 2F] (merged) or gate, up [rows, F] Config::X
//             ->  [rows, F] Config::Out = silu(gate) · up (gelu_tanh_mul: gelu_tanh(gate) · up)
//   add/mul:  a [rows, W] Config::A, b [rows, W] Config::B -> [rows, W] Config::Out
//   silu:     a [rows, W] -> [rows, W]
//   relu_squared: a [rows, W] -> [rows, W] = relu(a)²
//   gather_last_tokens: h [N, hidden], query_start [B + 1] -> [B, hidden]
//
// All math in f32, one rounding to the output type at the store.
// Grid-stride over rows · width / 8 vectors; block [Config::kThreads].
#pragma once

#include "common.cuh"

namespace kiln {
namespace kernels {

struct ActSilu { __device__ static float apply(float g) { return silu(g); } };
// PyTorch's gelu(approximate="tanh"): g/2 · (1 + tanh(sqrt(2/pi) · (g + 0.044715 g³))), in f32.
struct ActGeluTanh {
  __device__ static float apply(float g) {
    return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));
  }
};

// Config: using X, Out; static constexpr int kFfn, kThreads; static constexpr bool kMerged.
// One vector a thread (the grid covers them all): more a thread, loads batched, measured slower.
template <class Config, class Act>
__device__ __forceinline__ void gated_mul(const ElementwiseParams& p) {
  static_assert(Config::kFfn % 8 == 0, "16-byte vectors");
  constexpr int kVecs = Config::kFfn / 8;
  const long long total = (long long)p.rows * kVecs;
  for (long long i = blockIdx.x * (long long)Config::kThreads + threadIdx.x; i < total;
       i += (long long)gridDim.x * Config::kThreads) {
    const long long row = i / kVecs;
    const int col = (int)(i % kVecs) * 8;
    using X = typename Config::X;
    const X* gate;
    const X* up;
    if (Config::kMerged) {
      gate = static_cast<const X*>(p.a) + row * 2 * Config::kFfn + col;
      up = gate + Config::kFfn;
    } else {
      gate = static_cast<const X*>(p.a) + row * Config::kFfn + col;
      up = static_cast<const X*>(p.b) + row * Config::kFfn + col;
    }
    float g[8], u[8], y[8];
    load8(gate, g);
    load8(up, u);
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] = Act::apply(g[e]) * u[e];
    store8(static_cast<typename Config::Out*>(p.out) + row * Config::kFfn + col, y);
  }
}

template <class Config>
__device__ __forceinline__ void silu_mul(const ElementwiseParams& p) { gated_mul<Config, ActSilu>(p); }
template <class Config>
__device__ __forceinline__ void gelu_tanh_mul(const ElementwiseParams& p) { gated_mul<Config, ActGeluTanh>(p); }

struct OpAdd { static constexpr bool kBinary = true; __device__ static float apply(float a, float b) { return a + b; } };
struct OpMul { static constexpr bool kBinary = true; __device__ static float apply(float a, float b) { return a * b; } };
struct OpSilu { static constexpr bool kBinary = false; __device__ static float apply(float a, float) { return silu(a); } };
// Nemotron-H's MLP activation: relu(a)².
struct OpReluSquared {
  static constexpr bool kBinary = false;
  __device__ static float apply(float a, float) { return a > 0.0f ? a * a : 0.0f; }
};

// Config: using Op, A, B, Out; static constexpr int kWidth, kThreads.
template <class Config>
__device__ __forceinline__ void elementwise(const ElementwiseParams& p) {
  static_assert(Config::kWidth % 8 == 0, "16-byte vectors");
  using Op = typename Config::Op;
  const long long total = (long long)p.rows * Config::kWidth / 8;
  for (long long i = blockIdx.x * (long long)Config::kThreads + threadIdx.x; i < total;
       i += (long long)gridDim.x * Config::kThreads) {
    float a[8], b[8], y[8];
    load8(static_cast<const typename Config::A*>(p.a) + i * 8, a);
    if (Op::kBinary) load8(static_cast<const typename Config::B*>(p.b) + i * 8, b);
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] = Op::apply(a[e], Op::kBinary ? b[e] : 0.0f);
    store8(static_cast<typename Config::Out*>(p.out) + i * 8, y);
  }
}

// Config: using T; static constexpr int kHidden, kThreads. Grid [B].
template <class Config>
__device__ __forceinline__ void gather_last_tokens(const GatherLastTokensParams& p) {
  static_assert(Config::kHidden % 8 == 0, "16-byte vectors");
  const int b = blockIdx.x;
  if (b >= p.num_seqs) return;
  using T = typename Config::T;
  constexpr int kVecs = Config::kHidden * (int)sizeof(T) / 16;
  const long long src = (long long)(p.query_start[b + 1] - 1) * Config::kHidden;
  const uint4* in = reinterpret_cast<const uint4*>(static_cast<const T*>(p.h) + src);
  uint4* out = reinterpret_cast<uint4*>(static_cast<T*>(p.out) + (long long)b * Config::kHidden);
  for (int i = threadIdx.x; i < kVecs; i += Config::kThreads) out[i] = in[i];
}

}  // namespace kernels
}  // namespace kiln
