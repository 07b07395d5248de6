#include "runtime/cpu/kernels/quant_dot.h"

#include <cmath>
#include <cstring>

#include "runtime/cpu/kernels/cpu_isa.h"
#include "runtime/numerics/quant.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KILN_DOT_X86 1
#include <immintrin.h>
#endif

namespace kiln::cpu {
namespace {

const float* f16TableForDot() { return f16ToF32Table(); }

using DotFn = void (*)(WeightType, const void*, int64_t, int64_t, const ActivationQ8*, int64_t,
                       float*, int64_t);

// Portable reference: exact integer block sums, one f32 multiply-add per block.
void quantDotRowsScalar(WeightType type, const void* weights, int64_t rows, int64_t k,
                        const ActivationQ8* a, int64_t tokens, float* y, int64_t ldy) {
  const float* table = f16TableForDot();
  const int64_t nb = k / kQuantBlock;
  const int64_t row_bytes = rowBytes(type, k);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(weights) + r * row_bytes;
    for (int64_t t = 0; t < tokens; ++t) {
      const ActivationQ8* at = a + t * nb;
      float acc = 0.0f, extra = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t sum = 0;
        float dw = 0.0f;
        if (type == WeightType::Q8_0) {
          const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
          for (int j = 0; j < 32; ++j) sum += int32_t(blk.qs[j]) * at[b].qs[j];
          dw = table[blk.d];
        } else {
          const uint8_t* qs;
          if (type == WeightType::Q4_0) {
            const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
            qs = blk.qs;
            dw = table[blk.d];
            extra += -8.0f * dw * at[b].s;
          } else {
            const auto& blk = reinterpret_cast<const BlockQ4_1*>(row)[b];
            qs = blk.qs;
            dw = table[blk.d];
            extra += table[blk.m] * at[b].s;
          }
          for (int j = 0; j < 16; ++j) {
            sum += int32_t(qs[j] & 0x0f) * at[b].qs[j];
            sum += int32_t(qs[j] >> 4) * at[b].qs[j + 16];
          }
        }
        acc += float(sum) * (dw * at[b].d);
      }
      y[t * ldy + r] = acc + extra;
    }
  }
}

#if KILN_DOT_X86

// AVX2: u8*s8 pairs summed to s16 (no saturation: 15*127*2 and 128*127*2 fit),
// then pairs of s16 to s32.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define KILN_DOT_NS avx2
#define KILN_DOT_U8S8(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))
#include "runtime/cpu/kernels/quant_dot_simd.inc"
#undef KILN_DOT_NS
#undef KILN_DOT_U8S8
#pragma GCC pop_options

// AVX-VNNI (VEX-encoded dpbusd, e.g. Alder Lake): four u8*s8 products per
// int32 lane in one instruction.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
#define KILN_DOT_NS avxvnni
#define KILN_DOT_U8S8(u, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), (u), (s))
#include "runtime/cpu/kernels/quant_dot_simd.inc"
#undef KILN_DOT_NS
#undef KILN_DOT_U8S8
#pragma GCC pop_options

// AVX512-VNNI with VL: the same dpbusd on 256-bit registers (Ice Lake+, Zen4).
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")
#define KILN_DOT_NS avx512vnni
#define KILN_DOT_U8S8(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (s))
#include "runtime/cpu/kernels/quant_dot_simd.inc"
#undef KILN_DOT_NS
#undef KILN_DOT_U8S8
#pragma GCC pop_options

DotFn implFor(const char* isa) {
  if (std::strcmp(isa, "avx512vnni") == 0) return avx512vnni::quantDotRowsImpl;
  if (std::strcmp(isa, "avxvnni") == 0) return avxvnni::quantDotRowsImpl;
  if (std::strcmp(isa, "avx2") == 0) return avx2::quantDotRowsImpl;
  return quantDotRowsScalar;
}

#else
DotFn implFor(const char*) { return quantDotRowsScalar; }
#endif

struct Dispatch {
  const char* isa;
  DotFn fn;
};

Dispatch& dispatch() {
  static Dispatch d = [] {
    for (const char* isa : {"avx512vnni", "avxvnni", "avx2"})
      if (cpuHasIsa(isa)) return Dispatch{isa, implFor(isa)};
    return Dispatch{"scalar", quantDotRowsScalar};
  }();
  return d;
}

}  // namespace

void quantizeActivationQ8(const float* x, ActivationQ8* out, int64_t k) {
  const int64_t nb = k / kQuantBlock;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = amax == 0.0f ? 0.0f : 127.0f / amax;  // as ggml computes it
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) {
      int32_t q = int32_t(std::nearbyint(xb[j] * id));
      q = q > 127 ? 127 : q < -127 ? -127 : q;
      out[b].qs[j] = int8_t(q);
      sum += q;
    }
    // ggml keeps the activation block's scale and sum in f16; rounding them
    // the same way keeps kiln's dot products within float noise of llama.cpp's.
    out[b].d = f16ToF32(f32ToF16(d));
    out[b].s = f16ToF32(f32ToF16(d * float(sum)));
  }
}

void quantDotRows(WeightType type, const void* weights, int64_t rows, int64_t k,
                  const ActivationQ8* a, int64_t tokens, float* y, int64_t ldy) {
  dispatch().fn(type, weights, rows, k, a, tokens, y, ldy);
}

const char* quantDotIsa() { return dispatch().isa; }

bool setQuantDotIsaForTesting(const char* isa) {
  for (const char* name : {"avx512vnni", "avxvnni", "avx2", "scalar"})
    if (std::strcmp(name, isa) == 0 && cpuHasIsa(name)) {
      dispatch() = Dispatch{name, implFor(name)};
      return true;
    }
  return false;
}

}  // namespace kiln::cpu
