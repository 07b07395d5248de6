// The f32 vector routines of ggml's CPU backend, reproduced bit for bit:
// every rounding step of llama.cpp's attention, softmax and SiLU, so that
// kiln's activations match llama.cpp's exactly and the 8-bit activation
// quantization in front of each GEMM rounds the same values the same way
// (docs/design/cpu-numerics.md). Sources, llama.cpp ggml/src/ggml-cpu/:
// vec.h, vec.cpp, simd-mappings.h and llamafile/sgemm.cpp.
//
// ggml chooses these routines at compile time; a native build (what
// llama-cpp-python compiles) uses the widest instruction set of the machine.
// kiln chooses the same variant at run time:
//   "avx512": AVX-512 F+DQ, 16 f32 lanes, ggml_v_expf via vscalefps
//   "avx2":   AVX2 + FMA, 8 lanes, ggml_v_expf via exponent bits
//   "scalar": ggml's generic C code (f64 sums, libm expf)
// Internal to the kernels library.
#pragma once

#include <cstdint>

namespace kiln::cpu {

struct GgmlVec {
  const char* isa;
  int lanes;  // GGML_F32_EPR: 16, 8, or 1

  // ggml_vec_dot_f32 (mul_mat of f32 rows): four lane accumulators over
  // steps of 4 * lanes, reduced pairwise, then across lanes.
  float (*dot)(const float* x, const float* y, int64_t n);

  // out[e] = sum_j p[j] * v[j][e] for e < d, j < n, summed as ggml sums
  // V^T · p. one_accumulator: llamafile's tinyBLAS order (one lane
  // accumulator per output; llama.cpp's path for batches of >= 2 tokens),
  // else ggml_vec_dot_f32's order (single tokens). Key j feeds lane j % lanes
  // (tinyBLAS) or j % (4 * lanes) (vec_dot), so j must be the key's index in
  // llama.cpp's KV cache, which for one sequence is its position.
  void (*weightedSum)(const float* p, const float* const* v, int64_t n, int64_t d,
                      bool one_accumulator, float* out);

  // ggml_vec_soft_max_f32: y = exp(x - max) with ggml_v_expf; returns the f64
  // sum of the per-vector f32 sums.
  double (*softMax)(float* y, const float* x, int64_t n, float max);

  // ggml_vec_swiglu_f32: y = silu(x) * g, silu(x) = x / (1 + ggml_v_expf(-x)).
  void (*swiglu)(float* y, const float* x, const float* g, int64_t n);
  // ggml_vec_silu_f32.
  void (*silu)(float* y, const float* x, int64_t n);
};

// The variant for this CPU, chosen once.
const GgmlVec& ggmlVec();
// Tests force a variant ("avx512", "avx2", "scalar"); false if the CPU lacks it.
bool setGgmlVecIsaForTesting(const char* isa);

}  // namespace kiln::cpu
