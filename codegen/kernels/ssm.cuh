// State-space (Mamba-2) kernels over a ragged batch, each sequence's state
// in its slot of the layer's state pools (ssm_params.cuh):
//
//   ssm_conv1d:     out [rows, C] = act(bias + Σ_k w[c, k] · u[t + k, c]) over
//                   u = (carried K-1 inputs, the sequence's rows); the pool
//                   slot then holds u's last K-1 rows.
//                   grid [ceil(C / kThreads), batch], a thread a channel.
//   ssd_scan:       grid [heads, batch], kThreads threads. Rows go through
//                   in chunks of kChunk: δ = clamp(softplus(dt + dt_bias)),
//                   Λ the running sum of δA (A = -exp(a_log)), then
//                   y_t = e^{Λ_t} s·c_t + Σ_{s≤t} e^{Λ_t−Λ_s} δ_s (c_t·b_s) x_s + D x_t
//                   and s = e^{Λ_L} s + Σ_s e^{Λ_L−Λ_s} δ_s x_s ⊗ b_s, the state
//                   [head_dim, state] f32 read and written in the pool. One
//                   row (decode) is the recurrence. kChunk is a schedule
//                   choice (shared memory), not the model's chunk_size:
//                   the result is the same up to rounding.
//   ssm_gated_norm: grid [rows]: u = x · silu(gate), each kGroup run of a
//                   row divided by its RMS, times w.
//   selective_scan: Mamba(-1): grid [ceil(channels · kState / kThreads),
//                   batch]; kState consecutive lanes hold one channel's
//                   states, s = exp(δ A) s + δ x b, y = Σ_n s c + D x
//                   (a shuffle sum over the kState lanes), δ = softplus(dt).
//                   Channels are independent: the token loop runs inside.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "common.cuh"
#endif
#include "ssm_params.cuh"

namespace kiln {
namespace kernels {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(KILN_CUDA_EMULATION)

// torch.nn.functional.softplus (threshold 20).
__device__ __forceinline__ float ssm_softplus(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

// Config: using X, W, Out; kChannels, kWidth, kSilu, kThreads.
template <class Config>
__device__ __forceinline__ void ssm_conv1d(const SsmConvParams& p) {
  using X = typename Config::X;
  using W = typename Config::W;
  using Out = typename Config::Out;
  constexpr int C = Config::kChannels, K = Config::kWidth;
  static_assert(K >= 2 && K <= 8, "conv widths 2 to 8");
  const int ch = blockIdx.x * Config::kThreads + threadIdx.x;
  const int b = blockIdx.y;
  wait_for_previous_kernel();
  if (b >= p.batch || ch >= C) return;
  const int begin = p.query_start[b], end = p.query_start[b + 1];
  X* carried = static_cast<X*>(p.state) + (long long)p.slots[b] * (K - 1) * C;
  float w[K], window[K - 1];
  for (int k = 0; k < K; ++k) w[k] = to_float(static_cast<const W*>(p.w)[(long long)ch * K + k]);
  for (int k = 0; k < K - 1; ++k) window[k] = to_float(carried[(long long)k * C + ch]);
  const float bias = p.bias ? to_float(static_cast<const W*>(p.bias)[ch]) : 0.0f;
  const X* x = static_cast<const X*>(p.x);
  Out* out = static_cast<Out*>(p.out);
  for (int t = begin; t < end; ++t) {
    const float cur = to_float(x[(long long)t * p.x_stride + ch]);
    float acc = bias + w[K - 1] * cur;
    for (int k = 0; k < K - 1; ++k) acc += w[k] * window[k];
    for (int k = 0; k + 1 < K - 1; ++k) window[k] = window[k + 1];
    window[K - 2] = cur;
    out[(long long)t * C + ch] = from_float<Out>(Config::kSilu ? silu(acc) : acc);
  }
  for (int k = 0; k < K - 1; ++k) carried[(long long)k * C + ch] = from_float<X>(window[k]);
}

// Config: using X, P, Out; kHeads, kHeadDim, kGroups, kState, kChunk, kThreads.
template <class Config>
__device__ __forceinline__ void ssd_scan(const SsdScanParams& p) {
  using X = typename Config::X;
  using Par = typename Config::P;
  using Out = typename Config::Out;
  constexpr int H = Config::kHeads, P = Config::kHeadDim, G = Config::kGroups, N = Config::kState;
  constexpr int L = Config::kChunk, T = Config::kThreads;
  static_assert(H % G == 0, "groups divide heads");
  // δ, Λ [L]; b, c [L, N]; x [L, P]; c·b [L, L]
  constexpr int kSmemBytes = 4 * (2 * L + 2 * L * N + L * P + L * L);
  static_assert(kSmemBytes <= 48 * 1024, "static shared memory");
#if defined(KILN_CUDA_EMULATION)
  unsigned char* const smem = emulated_shared_memory(kSmemBytes);
#else
  __shared__ __align__(16) unsigned char smem[kSmemBytes];
#endif
  float* delta = reinterpret_cast<float*>(smem);
  float* lam = delta + L;
  float* bs = lam + L;
  float* cs = bs + L * N;
  float* xs = cs + L * N;
  float* cb = xs + L * P;
  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  wait_for_previous_kernel();
  if (b >= p.batch) return;
  const int begin = p.query_start[b], end = p.query_start[b + 1];
  const int g = h / (H / G);
  float* st = p.state + ((long long)p.slots[b] * H + h) * P * N;
  const float neg_a = -expf(to_float(static_cast<const Par*>(p.a_log)[h]));
  const float dt_bias = to_float(static_cast<const Par*>(p.dt_bias)[h]);
  const float skip = to_float(static_cast<const Par*>(p.d)[h]);
  const X* x = static_cast<const X*>(p.x);
  const X* bg = static_cast<const X*>(p.b);
  const X* cg = static_cast<const X*>(p.c);
  const X* dt = static_cast<const X*>(p.dt);
  Out* y = static_cast<Out*>(p.y);
  for (int c0 = begin; c0 < end; c0 += L) {
    const int len = end - c0 < L ? end - c0 : L;
    __syncthreads();  // the previous chunk's shared reads are done
    for (int i = tid; i < len; i += T) {
      const float v = ssm_softplus(to_float(dt[(long long)(c0 + i) * p.dt_stride + h]) + dt_bias);
      delta[i] = fminf(fmaxf(v, p.dt_min), p.dt_max);
    }
    for (int i = tid; i < len * N; i += T) {
      const long long row = (long long)(c0 + i / N) * p.bc_stride + g * N + i % N;
      bs[i] = to_float(bg[row]);
      cs[i] = to_float(cg[row]);
    }
    for (int i = tid; i < len * P; i += T) xs[i] = to_float(x[(long long)(c0 + i / P) * p.x_stride + h * P + i % P]);
    __syncthreads();
    if (tid == 0) {
      float run = 0.0f;
      for (int i = 0; i < len; ++i) {
        run += delta[i] * neg_a;
        lam[i] = run;
      }
    }
    for (int i = tid; i < len * len; i += T) {
      const int t = i / len, s = i % len;
      float dot = 0.0f;
      if (s <= t)
        for (int n = 0; n < N; ++n) dot += cs[t * N + n] * bs[s * N + n];
      cb[t * L + s] = dot;
    }
    __syncthreads();
    for (int i = tid; i < len * P; i += T) {
      const int t = i / P, pp = i % P;
      float carry = 0.0f;
      for (int n = 0; n < N; ++n) carry += st[pp * N + n] * cs[t * N + n];
      float acc = expf(lam[t]) * carry;
      for (int s = 0; s <= t; ++s) acc += expf(lam[t] - lam[s]) * delta[s] * cb[t * L + s] * xs[s * P + pp];
      y[(long long)(c0 + t) * H * P + h * P + pp] = from_float<Out>(acc + skip * xs[t * P + pp]);
    }
    __syncthreads();  // every read of the entering state is done
    const float total = expf(lam[len - 1]);
    for (int i = tid; i < P * N; i += T) {
      const int pp = i / N, n = i % N;
      float s_new = st[i] * total;
      for (int s = 0; s < len; ++s) s_new += expf(lam[len - 1] - lam[s]) * delta[s] * xs[s * P + pp] * bs[s * N + n];
      st[i] = s_new;
    }
  }
}

// Config: using X, W, Out; kFeatures, kGroup, kThreads.
template <class Config>
__device__ __forceinline__ void ssm_gated_norm(const SsmGatedNormParams& p) {
  using X = typename Config::X;
  using W = typename Config::W;
  using Out = typename Config::Out;
  constexpr int F = Config::kFeatures, kGroup = Config::kGroup, T = Config::kThreads;
  static_assert(F % kGroup == 0, "groups tile the row");
  static_assert(T % 32 == 0 && T <= 1024, "whole warps");
  constexpr int kWarps = T / 32;
#if defined(KILN_CUDA_EMULATION)
  float* const partial = reinterpret_cast<float*>(emulated_shared_memory(kWarps * 4));
#else
  __shared__ float partial[kWarps];
#endif
  const int r = blockIdx.x;
  wait_for_previous_kernel();
  if (r >= p.rows) return;
  const X* x = static_cast<const X*>(p.x) + (long long)r * F;
  const X* gate = static_cast<const X*>(p.gate) + (long long)r * p.gate_stride;
  const W* w = static_cast<const W*>(p.w);
  Out* out = static_cast<Out*>(p.out) + (long long)r * F;
  for (int g0 = 0; g0 < F; g0 += kGroup) {
    float ss = 0.0f;
    for (int f = g0 + threadIdx.x; f < g0 + kGroup; f += T) {
      const float u = to_float(x[f]) * silu(to_float(gate[f]));
      ss += u * u;
    }
    ss = warp_sum(ss);
    __syncthreads();  // the previous group's partial sums are read
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < kWarps; ++i) total += partial[i];
    const float inv = rsqrtf(total / float(kGroup) + p.eps);
    for (int f = g0 + threadIdx.x; f < g0 + kGroup; f += T)
      out[f] = from_float<Out>(to_float(x[f]) * silu(to_float(gate[f])) * inv * to_float(w[f]));
  }
}

// Config: using X, P, Out; kChannels, kState (a power of two <= 32), kThreads.
template <class Config>
__device__ __forceinline__ void selective_scan(const SelectiveScanParams& p) {
  using X = typename Config::X;
  using Par = typename Config::P;
  using Out = typename Config::Out;
  constexpr int C = Config::kChannels, N = Config::kState;
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "state size a power of two up to a warp");
  static_assert(Config::kThreads % 32 == 0, "whole warps");
  const int lane_pair = blockIdx.x * Config::kThreads + threadIdx.x;
  const int ch = lane_pair / N, n = lane_pair % N;
  const int b = blockIdx.y;
  wait_for_previous_kernel();
  // Whole N-lane groups leave together (C · N fills whole warps when N divides 32), so the shuffles see full groups.
  if (b >= p.batch || ch >= C) return;
  const int begin = p.query_start[b], end = p.query_start[b + 1];
  float* st = p.state + ((long long)p.slots[b] * C + ch) * N + n;
  const float neg_a = -expf(to_float(static_cast<const Par*>(p.a_log)[(long long)ch * N + n]));
  const float skip = to_float(static_cast<const Par*>(p.d)[ch]);
  const X* x = static_cast<const X*>(p.x);
  const X* dt = static_cast<const X*>(p.dt);
  const X* bb = static_cast<const X*>(p.b);
  const X* cc = static_cast<const X*>(p.c);
  Out* y = static_cast<Out*>(p.y);
  float s = *st;
  for (int t = begin; t < end; ++t) {
    const float delta = ssm_softplus(to_float(dt[(long long)t * p.dt_stride + ch]));
    const float xt = to_float(x[(long long)t * p.x_stride + ch]);
    s = expf(delta * neg_a) * s + delta * xt * to_float(bb[(long long)t * p.bc_stride + n]);
    float part = s * to_float(cc[(long long)t * p.bc_stride + n]);
    for (int o = N / 2; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
    if (n == 0) y[(long long)t * C + ch] = from_float<Out>(part + skip * xt);
  }
  *st = s;
}

#endif

}  // namespace kernels
}  // namespace kiln
