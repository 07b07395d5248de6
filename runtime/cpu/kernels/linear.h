// Dense layer y = x · Wᵀ (+ bias), the CPU backend's GEMM for every weight
// format. Two paths, chosen by weight format:
//  - block-quantized W (q4_0, q4_1, q8_0; the K-quants q4_k, q5_k, q6_k):
//    x is quantized once to 8-bit blocks (of 32; of 256 for the K-quants)
//    and each W row is dotted with integer SIMD (quant_dot.h); parallel over
//    W rows. This is llama.cpp's arithmetic, for every token
//    count: prefill and decode round the same way, so a sequence's logits do
//    not depend on how many tokens share its batch.
//  - float W (f32, f16, bf16): tiles of W rows are converted to f32 and
//    multiplied with OpenBLAS sgemm (single-threaded BLAS, parallel over
//    tiles here, so the kernel pool is the only source of threads).
#pragma once

#include <cstdint>

#include "runtime/numerics/weight_type.h"
#include "runtime/support/error.h"

namespace kiln::cpu {

// x:    [tokens, k] f32, rows contiguous
// w:    [n, k] stored as w_type, rows rowBytes(w_type, k) bytes apart
// bias: [n] f32, or null
// y:    [tokens, n] f32 (must not alias x)
// k must be a multiple of quantBlockElements(w_type): 32, or 256 for the
// K-quants.
Status linear(const float* x, int64_t tokens, int64_t k, const void* w, WeightType w_type,
              int64_t n, const float* bias, float* y);

// The OpenBLAS kernel family in use, e.g. "skylakex" or "haswell". OpenBLAS
// 0.3.21's DYNAMIC_ARCH falls back to "prescott" (SSE3, ~3x slower sgemm) on
// CPUs it does not know, including some recent Xeons in VMs; the fix is
// OPENBLAS_CORETYPE=SkylakeX (or Haswell) in the environment before start-up,
// because OpenBLAS picks its kernels in its library constructor.
const char* blasCoreName();

// The GEMMs thread over tiles themselves (the kernel pool); OpenBLAS's own
// threads would multiply the thread count by the pool size. Every caller of
// cblas_sgemm calls this first.
void pinBlasToOneThread();

// Forces the path, for tests and benchmarks.
enum class LinearPath { kAuto, kQuantDot, kDequantSgemm };

// What kAuto picks for block-quantized weights: the quantized dot
// (llama.cpp's arithmetic, the default) or dequantize + sgemm with f32
// activations (exact up to f32 rounding; used to check the model's graph
// against a float64 reference). Process-wide, set before running.
void setQuantizedWeightPath(LinearPath path);
Status linearWithPath(const float* x, int64_t tokens, int64_t k, const void* w,
                      WeightType w_type, int64_t n, const float* bias, float* y, LinearPath path);

}  // namespace kiln::cpu
