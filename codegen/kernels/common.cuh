// Shared device helpers of kiln's kernels: element conversions, 16-byte
// vector loads/stores, warp and block reductions. NVRTC-compilable: only
// CUDA builtins and cuda_bf16.h / cuda_fp16.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernel_params.cuh"

namespace kiln {
namespace kernels {

using bf16 = __nv_bfloat16;
using f16 = __half;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(f16 x) { return __half2float(x); }

template <class T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ f16 from_float<f16>(float x) { return __float2half_rn(x); }

// Rounds through T and back (what storing to a T buffer does to a value).
template <class T> __device__ __forceinline__ float round_to(float x) { return to_float(from_float<T>(x)); }

// Loads 8 consecutive elements of T (16 bytes for 2-byte types, 32 for f32)
// into f32 through `load` (const uint4* -> uint4: plain, read-only path, or
// with an L2 policy); `p` must be 16-byte aligned.
template <class T, class Load>
__device__ __forceinline__ void load8_with(const T* p, float (&out)[8], Load load) {
  constexpr int kPerVec = 16 / sizeof(T);
#pragma unroll
  for (int v = 0; v < 8 / kPerVec; ++v) {
    const uint4 raw = load(reinterpret_cast<const uint4*>(p + v * kPerVec));
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kPerVec; ++i) out[v * kPerVec + i] = to_float(e[i]);
  }
}
template <class T>
__device__ __forceinline__ void load8(const T* p, float (&out)[8]) {
  load8_with(p, out, [](const uint4* q) { return *q; });
}

// Read-only-path variant for weights that never change during a kernel.
template <class T>
__device__ __forceinline__ void load8_nc(const T* p, float (&out)[8]) {
  load8_with(p, out, [](const uint4* q) { return __ldg(q); });
}

// L2 policies for loads that name one (load8_stream). A kernel that reads
// each byte of a weight once marks it evict-first, so the stream does not
// push out what the next kernels read again (activations, the KV pages,
// the weights of a grid that walks them twice).
__device__ __forceinline__ unsigned long long l2_policy_evict_first() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ unsigned long long l2_policy_evict_normal() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Raw loads of packed weights (quant_blocks.cuh): 16 bytes of quants under
// an L2 policy, and scales through the read-only path.
__device__ __forceinline__ uint4 load_u128_stream(const void* p, unsigned long long policy) {
  uint4 q;
  asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w)
               : "l"(p), "l"(policy));
  return q;
}
__device__ __forceinline__ unsigned load_u32_nc(const void* p) { return __ldg(static_cast<const unsigned*>(p)); }

// load8_nc under an L2 policy from the functions above.
template <class T>
__device__ __forceinline__ void load8_stream(const T* p, float (&out)[8], unsigned long long policy) {
  load8_with(p, out, [policy](const uint4* q) {
    uint4 raw;
    asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(raw.x), "=r"(raw.y), "=r"(raw.z), "=r"(raw.w)
                 : "l"(q), "l"(policy));
    return raw;
  });
}

template <class T>
__device__ __forceinline__ void store8(T* p, const float (&in)[8]) {
  constexpr int kPerVec = 16 / sizeof(T);
#pragma unroll
  for (int v = 0; v < 8 / kPerVec; ++v) {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < kPerVec; ++i) e[i] = from_float<T>(in[v * kPerVec + i]);
    *reinterpret_cast<uint4*>(p + v * kPerVec) = raw;
  }
}

// Programmatic dependent launch (sm_90+). The runtime launches every kernel
// allowed to start while the previous one in its stream is still running, so
// its launch and its reads of constant weights overlap that kernel's tail.
// Before reading anything an earlier kernel writes, and before writing
// anything an earlier kernel reads, a kernel waits: every block, before any
// early return, so a kernel never completes before its predecessor has
// (that makes the wait transitive down the stream). Both are no-ops when the
// kernel was launched without the attribute.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel in the stream launch now; it still waits for this
// one's completion before touching its results.
__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// SiLU in f32 (silu_mul, silu, and the gate/up GEMV's SwiGLU epilogue).
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Sum over a block of kThreads threads (a multiple of 32, <= 1024); every
// thread gets the result. The order of additions is fixed by the launch
// shape, so results are reproducible run to run.
template <int kThreads>
__device__ __forceinline__ float block_sum(float x) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block of whole warps");
  constexpr int kWarps = kThreads / 32;
  __shared__ float partial[kWarps];
  x = warp_sum(x);
  if (kWarps == 1) return x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // partial[] may still be read by a previous call
  if (lane == 0) partial[warp] = x;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += partial[w];
  return total;
}

template <int kThreads>
__device__ __forceinline__ float block_max(float x) {
  constexpr int kWarps = kThreads / 32;
  __shared__ float partial[kWarps];
  x = warp_max(x);
  if (kWarps == 1) return x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) partial[warp] = x;
  __syncthreads();
  float best = partial[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) best = fmaxf(best, partial[w]);
  return best;
}

}  // namespace kernels
}  // namespace kiln
