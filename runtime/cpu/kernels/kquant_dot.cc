// K-quant dot products (quant_dot.h's kQuantDotRows): q4_k, q5_k and q6_k
// super-blocks against 256-element 8-bit activation blocks. Per super-block
// and token the sum is exact in int32,
//   q4_k/q5_k: d·da · Σ_j scale_j Σ_l q·a  -  dmin·da · Σ_j min_j Σ_l a
//   q6_k:      d·da · (Σ_h scale_h Σ_l q·a  -  32 Σ_h scale_h Σ_l a)
// (j over 32-element sub-blocks, h over 16-element ones), then one or two
// f32 multiply-adds; the activation sums come with the activation block.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "runtime/cpu/kernels/quant_dot.h"
#include "runtime/numerics/quant.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KILN_DOT_X86 1
#include <immintrin.h>
#endif

namespace kiln::cpu {
namespace {

using KQuantDotFn = void (*)(WeightType, const void*, int64_t, int64_t, const ActivationQ8K*,
                             int64_t, float*, int64_t);

// The unsigned quant of element e of a q4_k/q5_k super-block (0..15, 0..31).
template <typename Block>
int kQuantValue(const Block& blk, int e) {
  const int j = e / 32, l = e % 32;
  int q = (blk.qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0f;
  if constexpr (std::is_same_v<Block, BlockQ5_K>) q |= ((blk.qh[l] >> j) & 1) << 4;
  return q;
}

// Portable reference: the same integer sums as the SIMD bodies, one f32
// multiply-add per super-block term.
template <typename Block>
float dotMinBlocks(const Block* blocks, int64_t nsb, const ActivationQ8K* a) {
  const float* table = f16ToF32Table();
  float acc = 0.0f;
  for (int64_t b = 0; b < nsb; ++b) {
    const Block& blk = blocks[b];
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      const KQuantScale s = kQuantScale(blk.scales, j);
      int32_t sub = 0;
      for (int l = 0; l < 32; ++l) sub += kQuantValue(blk, 32 * j + l) * a[b].qs[32 * j + l];
      isum += int32_t(s.scale) * sub;
      msum += int32_t(s.min) * (a[b].sums[2 * j] + a[b].sums[2 * j + 1]);
    }
    acc += table[blk.d] * a[b].d * float(isum);
    acc -= table[blk.dmin] * a[b].d * float(msum);
  }
  return acc;
}

float dotQ6KBlocks(const BlockQ6_K* blocks, int64_t nsb, const ActivationQ8K* a) {
  const float* table = f16ToF32Table();
  float acc = 0.0f;
  for (int64_t b = 0; b < nsb; ++b) {
    const BlockQ6_K& blk = blocks[b];
    int32_t isum = 0;
    for (int h = 0; h < 16; ++h) {
      int32_t sub = 0;
      for (int l = 0; l < 16; ++l) sub += q6kQuant(blk, 16 * h + l) * a[b].qs[16 * h + l];
      isum += int32_t(blk.scales[h]) * (sub - 32 * a[b].sums[h]);
    }
    acc += table[blk.d] * a[b].d * float(isum);
  }
  return acc;
}

void kQuantDotRowsScalar(WeightType type, const void* weights, int64_t rows, int64_t k,
                         const ActivationQ8K* a, int64_t tokens, float* y, int64_t ldy) {
  const int64_t nsb = k / kSuperBlock;
  const int64_t row_bytes = rowBytes(type, k);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(weights) + r * row_bytes;
    for (int64_t t = 0; t < tokens; ++t) {
      const ActivationQ8K* at = a + t * nsb;
      float dot = 0.0f;
      switch (type) {
        case WeightType::Q4_K:
          dot = dotMinBlocks(reinterpret_cast<const BlockQ4_K*>(row), nsb, at);
          break;
        case WeightType::Q5_K:
          dot = dotMinBlocks(reinterpret_cast<const BlockQ5_K*>(row), nsb, at);
          break;
        case WeightType::Q6_K:
          dot = dotQ6KBlocks(reinterpret_cast<const BlockQ6_K*>(row), nsb, at);
          break;
        default: break;
      }
      y[t * ldy + r] = dot;
    }
  }
}

#if KILN_DOT_X86

// The same three instruction sets as quant_dot.cc, with the same u8 x s8
// products (no saturation: 2 * 63 * 127 fits in s16).
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define KILN_DOT_NS avx2
#define KILN_DOT_U8S8(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))
#include "runtime/cpu/kernels/kquant_dot_simd.inc"
#undef KILN_DOT_NS
#undef KILN_DOT_U8S8
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
#define KILN_DOT_NS avxvnni
#define KILN_DOT_U8S8(u, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), (u), (s))
#include "runtime/cpu/kernels/kquant_dot_simd.inc"
#undef KILN_DOT_NS
#undef KILN_DOT_U8S8
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")
#define KILN_DOT_NS avx512vnni
#define KILN_DOT_U8S8(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (s))
#include "runtime/cpu/kernels/kquant_dot_simd.inc"
#undef KILN_DOT_NS
#undef KILN_DOT_U8S8
#pragma GCC pop_options

KQuantDotFn implFor(const char* isa) {
  if (std::strcmp(isa, "avx512vnni") == 0) return avx512vnni::kQuantDotRowsImpl;
  if (std::strcmp(isa, "avxvnni") == 0) return avxvnni::kQuantDotRowsImpl;
  if (std::strcmp(isa, "avx2") == 0) return avx2::kQuantDotRowsImpl;
  return kQuantDotRowsScalar;
}

#else
KQuantDotFn implFor(const char*) { return kQuantDotRowsScalar; }
#endif

}  // namespace

void quantizeActivationQ8K(const float* x, ActivationQ8K* out, int64_t k) {
  const int64_t nsb = k / kSuperBlock;
  for (int64_t b = 0; b < nsb; ++b) {
    const float* xb = x + b * kSuperBlock;
    ActivationQ8K& blk = out[b];
    // The signed value of the first largest magnitude, as ggml picks it.
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < 256; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&blk, 0, sizeof blk);
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < 256; ++j) {
      const int32_t q = int32_t(std::nearbyint(iscale * xb[j]));
      blk.qs[j] = int8_t(q > 127 ? 127 : q < -127 ? -127 : q);
    }
    for (int h = 0; h < 16; ++h) {
      int32_t sum = 0;
      for (int l = 0; l < 16; ++l) sum += blk.qs[16 * h + l];
      blk.sums[h] = int16_t(sum);
    }
    blk.d = 1.0f / iscale;
  }
}

void kQuantDotRows(WeightType type, const void* weights, int64_t rows, int64_t k,
                   const ActivationQ8K* a, int64_t tokens, float* y, int64_t ldy) {
  implFor(quantDotIsa())(type, weights, rows, k, a, tokens, y, ldy);
}

}  // namespace kiln::cpu
