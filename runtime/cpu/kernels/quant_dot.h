// Quantized dot products for decode-sized GEMMs, the llama.cpp way: the f32
// activation row is quantized once to 8-bit blocks, then every weight row is
// dotted block by block with integer multiply-adds (AVX2 maddubs, or VNNI
// dpbusd where the CPU has it), one f32 scale multiply per block.
// The 32-element weight blocks (q4_0, q4_1, q8_0) meet 32-element activation
// blocks (quantDotRows); the K-quant super-blocks (q4_k, q5_k, q6_k) meet
// 256-element activation blocks as in ggml's q8_K (kQuantDotRows, in
// kquant_dot.cc), so the integer sums are llama.cpp's.
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

// Activation super-block for the K-quant dots, ggml's block_q8_K arithmetic:
// one f32 scale per 256 values (with `max` the first value of largest
// magnitude, qs = round-to-even(x * (-127 / max)), so `max` itself becomes
// -127, and d = max / -127) and the sum of each run of 16 quants, which the
// weights' minimums (q4_k, q5_k) and q6_k's -32 offset multiply instead of
// every element.
struct ActivationQ8K {
  float d;
  int8_t qs[256];
  int16_t sums[16];
};
static_assert(sizeof(ActivationQ8K) == 292);

// x: [k] f32 -> out: [k / 256] super-blocks. k must be a multiple of 256.
void quantizeActivationQ8K(const float* x, ActivationQ8K* out, int64_t k);

// quantDotRows for the K-quants: for weight rows w[0..rows) (rowBytes(type,
// k) bytes apart) and activations a[0..tokens) (each k/256 super-blocks
// apart):
//   y[t * ldy + r] = dot(dequant(w[r]), dequant(a[t]))
// type must be Q4_K, Q5_K or Q6_K. Uses the implementation quantDotIsa()
// names.
void kQuantDotRows(WeightType type, const void* weights, int64_t rows, int64_t k,
                   const ActivationQ8K* a, int64_t tokens, float* y, int64_t ldy);

// Which implementation quantDotRows dispatches to: "avx512vnni", "avxvnni",
// "avx2" or "scalar". Chosen once from __builtin_cpu_supports.
const char* quantDotIsa();
// Tests force an implementation (of both quantDotRows and kQuantDotRows) to
// check each against the scalar one; returns false if the CPU lacks it.
bool setQuantDotIsaForTesting(const char* isa);

}  // namespace kiln::cpu
