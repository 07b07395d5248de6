// Row-wise elementwise kernels, 8 elements per thread and step: silu_mul
// (SwiGLU); add, mul, silu with per-operand element types (an f32 residual
// stream plus a bf16 branch output -> f32); gather_last_tokens copying rows
// of Config::T.
//
//   silu_mul: gate_up [rows, 2F] (merged) or gate, up [rows, F] Config::X
//             ->  [rows, F] Config::Out = silu(gate) · up
//   add/mul:  a [rows, W] Config::A, b [rows, W] Config::B -> [rows, W] Config::Out
//   silu:     a [rows, W] -> [rows, W]
//   gather_last_tokens: h [N, hidden], query_start [B + 1] -> [B, hidden]
//
// All math in f32, one rounding to the output type at the store.
// Grid-stride over rows · width / 8 vectors; block [Config::kThreads].
#pragma once

#include "common.cuh"

namespace kiln {
namespace kernels {

// Config: using X, Out; static constexpr int kFfn, kThreads; static constexpr bool kMerged.
// Each thread takes kSiluMulVectors vectors a pass (kernel_params.cuh), all
// their loads issued before any math, so a thread keeps 4 x 2 16-byte loads
// in flight. gate/up is read once: evict-first, so the output, which the
// down GEMM reads next, keeps more of L2.
template <class Config>
__device__ __forceinline__ void silu_mul(const ElementwiseParams& p) {
  static_assert(Config::kFfn % 8 == 0, "16-byte vectors");
  constexpr int kVecs = Config::kFfn / 8;
  constexpr int kPerThread = kSiluMulVectors;
  using X = typename Config::X;
  const unsigned long long policy = l2_policy_evict_first();
  const long long total = (long long)p.rows * kVecs;
  const long long stride = (long long)gridDim.x * Config::kThreads * kPerThread;
  for (long long first = blockIdx.x * (long long)Config::kThreads * kPerThread + threadIdx.x; first < total;
       first += stride) {
    float g[kPerThread][8], u[kPerThread][8];
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const long long i = first + (long long)j * Config::kThreads;
      if (i >= total) break;
      const long long row = i / kVecs;
      const int col = (int)(i % kVecs) * 8;
      const X* gate = static_cast<const X*>(p.a) + row * (Config::kMerged ? 2 : 1) * Config::kFfn + col;
      const X* up = Config::kMerged ? gate + Config::kFfn
                                    : static_cast<const X*>(p.b) + row * Config::kFfn + col;
      load8_stream(gate, g[j], policy);
      load8_stream(up, u[j], policy);
    }
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const long long i = first + (long long)j * Config::kThreads;
      if (i >= total) break;
      const long long row = i / kVecs;
      const int col = (int)(i % kVecs) * 8;
      float y[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) y[e] = silu(g[j][e]) * u[j][e];
      store8(static_cast<typename Config::Out*>(p.out) + row * Config::kFfn + col, y);
    }
  }
}

struct OpAdd { static constexpr bool kBinary = true; __device__ static float apply(float a, float b) { return a + b; } };
struct OpMul { static constexpr bool kBinary = true; __device__ static float apply(float a, float b) { return a * b; } };
struct OpSilu { static constexpr bool kBinary = false; __device__ static float apply(float a, float) { return silu(a); } };

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
