// Quantized dot products for decode-sized GEMMs, the llama.cpp way: the f32
// activation row is quantized once to 8-bit blocks, then every weight row is
// dotted block by block with integer multiply-adds (AVX2 maddubs, or VNNI
// dpbusd where the CPU has it), one f32 scale multiply per block.
// Internal to the kernels library; linear() is the public entry.
#pragma once

#include <cstdint>

#include "runtime/numerics/weight_type.h"

namespace kiln::cpu {

// Activation block: our own layout (not ggml's block_q8_1), with f32 scales to
// lose as little as possible. s = d * sum(qs) lets Q4_0's -8 offset and Q4_1's
// minimum fold into one multiply per block.
struct ActivationQ8 {
  float d;
  float s;
  int8_t qs[32];
};
static_assert(sizeof(ActivationQ8) == 40);

// x: [k] f32 -> out: [k / 32] blocks. k must be a multiple of 32.
void quantizeActivationQ8(const float* x, ActivationQ8* out, int64_t k);

// For weight rows w[0..rows) (each rowBytes(type, k) bytes apart, starting at
// `weights`) and activations a[0..tokens) (each k/32 blocks apart):
//   y[t * ldy + r] = dot(dequant(w[r]), dequant(a[t]))
// type must be Q4_0, Q4_1 or Q8_0.
void quantDotRows(WeightType type, const void* weights, int64_t rows, int64_t k,
                  const ActivationQ8* a, int64_t tokens, float* y, int64_t ldy);

// Which implementation quantDotRows dispatches to: "avx512vnni", "avxvnni",
// "avx2" or "scalar". Chosen once from __builtin_cpu_supports.
const char* quantDotIsa();
// Tests force an implementation to check each against the scalar one; returns
// false if the CPU lacks it.
bool setQuantDotIsaForTesting(const char* isa);

}  // namespace kiln::cpu
