#include "runtime/cpu/kernels/ggml_vec.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/cpu/kernels/cpu_isa.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KILN_GGML_X86 1
#include <immintrin.h>
#endif

namespace kiln::cpu {
namespace {

// Lane accumulators of weightedSum: [slots, d] f32, reused per thread.
float* laneScratch(int64_t count) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < size_t(count)) buffer.resize(size_t(count));
  std::memset(buffer.data(), 0, size_t(count) * sizeof(float));
  return buffer.data();
}

// Key j's products go to lane slot j % slots (one FMA chain per slot, keys in
// order), vectorized over the d outputs; fma is exact, so vectorizing does
// not change a bit.
__attribute__((always_inline)) inline void accumulateLanes(float* acc, int slots, const float* p, const float* const* v,
                            int64_t n, int64_t d) {
  for (int64_t j = 0; j < n; ++j) {
    float* a = acc + (j % slots) * d;
    const float pj = p[j];
    const float* vj = v[j];
    for (int64_t e = 0; e < d; ++e) a[e] = std::fma(vj[e], pj, a[e]);
  }
}

// a[e] = a[e] + b[e]: one lane-wise vector add of ggml's, for all d outputs.
__attribute__((always_inline)) inline void addRows(float* a, const float* b, int64_t d) {
  for (int64_t e = 0; e < d; ++e) a[e] = a[e] + b[e];
}

// GGML_F32_VEC_REDUCE's first part: x0 += x2, x1 += x3, x0 += x1, over the
// four accumulators of `lanes` slots each; leaves the result in slots [0, lanes).
__attribute__((always_inline)) inline void foldFourAccumulators(float* acc, int lanes, int64_t d) {
  for (int l = 0; l < lanes; ++l) addRows(acc + l * d, acc + (2 * lanes + l) * d, d);
  for (int l = 0; l < lanes; ++l) addRows(acc + (lanes + l) * d, acc + (3 * lanes + l) * d, d);
  for (int l = 0; l < lanes; ++l) addRows(acc + l * d, acc + (lanes + l) * d, d);
}

// The scalar variant: ggml's generic C, no SIMD.
namespace scalar {

float dot(const float* x, const float* y, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i] * y[i]);
  return float(sum);
}

void weightedSum(const float* p, const float* const* v, int64_t n, int64_t d, bool,
                 float* out) {
  for (int64_t e = 0; e < d; ++e) {
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += double(v[j][e] * p[j]);
    out[e] = float(sum);
  }
}

// ggml_vec_soft_max_f32's scalar loop from element i on, adding to the f64
// running sum in order: all of it here, the last n % lanes elements in the
// SIMD variants.
double softMaxFrom(int64_t i, float* y, const float* x, int64_t n, float max, double sum) {
  for (; i < n; ++i) {
    const float val = std::exp(x[i] - max);
    sum += double(val);
    y[i] = val;
  }
  return sum;
}

double softMax(float* y, const float* x, int64_t n, float max) {
  return softMaxFrom(0, y, x, n, max, 0.0);
}

// ggml_silu_f32.
inline float siluOne(float x) { return x / (1.0f + std::exp(-x)); }

void swiglu(float* y, const float* x, const float* g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = siluOne(x[i]) * g[i];
}

void silu(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = siluOne(x[i]);
}

}  // namespace scalar

#if KILN_GGML_X86

#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512dq,avx512vl")
// GCC 12's intrinsics start some results from _mm512_undefined_*(), which
// its own -Wuninitialized then flags.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace avx512 {

// _mm512_reduce_add_ps as GCC expands it (ggml is built with GCC):
// halves, then quarters, then (0+2, 1+3), then the two. Spelled out so the
// tree does not depend on the compiler building kiln.
inline float reduceAdd(__m512 a) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
  const __m256 lo = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 0));
  const __m256 t3 = _mm256_add_ps(hi, lo);
  const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
  const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_shuffle_ps(t8, t8, 1));
}

// ggml_v_expf (AVX-512): ARM's optimized-routines expf, max error 1.45 ulp.
// ggml's AVX2 one (below) has the same range reduction and coefficients but
// other last steps: here the polynomial keeps the 1 (c1*b + 1) and vscalefps
// scales it by 2^n; there it stops at c1*b and forms k + k*j from exponent
// bits. They round differently, so each stays whole, as ggml writes it.
inline __m512 expV(__m512 x) {
  const __m512 r = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
  const __m512 n = _mm512_sub_ps(z, r);
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 j = _mm512_fmadd_ps(
      _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b,
                                      _mm512_set1_ps(0x1.573e2ep-5f)),
                      u,
                      _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b,
                                      _mm512_set1_ps(0x1.fffdb6p-2f))),
      u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
  const __m512 res = _mm512_scalef_ps(j, n);
  if (_mm512_kortestz(d, d)) return res;
  const __m512 zero = _mm512_setzero_ps();
  const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, zero, _CMP_LE_OQ),
                                          _mm512_set1_ps(INFINITY), zero);
  return _mm512_mask_blend_ps(d, res, alt);
}

// ggml_vec_simd.inc at 16 lanes.
using Vec = __m512;
constexpr int kLanes = 16;
inline Vec load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec broadcast(float x) { return _mm512_set1_ps(x); }
inline Vec fmadd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float softMaxSum(Vec v) { return reduceAdd(v); }
inline float dotSum(Vec v) { return reduceAdd(v); }
#include "runtime/cpu/kernels/ggml_vec_simd.inc"

// _mm512_reduce_add_ps's tree, lane-wise over d outputs: slot l holds lane l.
void reduceLanes(float* acc, int64_t d, float* out) {
  for (int l = 0; l < 8; ++l) addRows(acc + l * d, acc + (l + 8) * d, d);
  for (int l = 0; l < 4; ++l) addRows(acc + l * d, acc + (l + 4) * d, d);
  addRows(acc, acc + 2 * d, d);
  addRows(acc + d, acc + 3 * d, d);
  for (int64_t e = 0; e < d; ++e) out[e] = acc[e] + acc[d + e];
}

void weightedSum(const float* p, const float* const* v, int64_t n, int64_t d,
                 bool one_accumulator, float* out) {
  // tinyBLAS<16, __m512>: one accumulator, hsum = _mm512_reduce_add_ps.
  // ggml_vec_dot_f32: four accumulators folded first.
  const int slots = one_accumulator ? 16 : 64;
  float* acc = laneScratch(slots * d);
  accumulateLanes(acc, slots, p, v, n, d);
  if (!one_accumulator) foldFourAccumulators(acc, 16, d);
  reduceLanes(acc, d, out);
}

}  // namespace avx512
#pragma GCC diagnostic pop
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {

// hsum_float_8 / tinyBLAS hsum(__m256): (0+4, 1+5, 2+6, 3+7), then
// (0+2, 1+3), then the two.
inline float hsum8(__m256 x) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// ggml_v_expf (AVX2); why it is not shared with the AVX-512 one: above.
inline __m256 expV(__m256 x) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k =
      _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
  const __m256i c = _mm256_castps_si256(
      _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(126), _CMP_GT_OQ));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b,
                                      _mm256_set1_ps(0x1.573e2ep-5f)),
                      u,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b,
                                      _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
  if (!_mm256_movemask_ps(_mm256_castsi256_ps(c))) return _mm256_fmadd_ps(j, k, k);
  const __m256i g = _mm256_and_si256(
      _mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
      _mm256_set1_epi32(int(0x82000000u)));
  const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
  const __m256i dd = _mm256_castps_si256(
      _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(192), _CMP_GT_OQ));
  return _mm256_or_ps(
      _mm256_and_ps(_mm256_castsi256_ps(dd), _mm256_mul_ps(s1, s1)),
      _mm256_andnot_ps(
          _mm256_castsi256_ps(dd),
          _mm256_or_ps(
              _mm256_and_ps(_mm256_castsi256_ps(c), _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
              _mm256_andnot_ps(_mm256_castsi256_ps(c), _mm256_fmadd_ps(k, j, k)))));
}

// GGML_F32x8_REDUCE's tail: halves, then two horizontal adds.
inline float haddSum8(__m256 x) {
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

// ggml_vec_simd.inc at 8 lanes.
using Vec = __m256;
constexpr int kLanes = 8;
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec broadcast(float x) { return _mm256_set1_ps(x); }
inline Vec fmadd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float softMaxSum(Vec v) { return hsum8(v); }
inline float dotSum(Vec v) { return haddSum8(v); }
#include "runtime/cpu/kernels/ggml_vec_simd.inc"

void weightedSum(const float* p, const float* const* v, int64_t n, int64_t d,
                 bool one_accumulator, float* out) {
  const int slots = one_accumulator ? 8 : 32;
  float* acc = laneScratch(slots * d);
  accumulateLanes(acc, slots, p, v, n, d);
  if (one_accumulator) {
    // tinyBLAS<8, __m256>: hsum8's tree.
    for (int l = 0; l < 4; ++l) addRows(acc + l * d, acc + (l + 4) * d, d);
    addRows(acc, acc + 2 * d, d);
    addRows(acc + d, acc + 3 * d, d);
  } else {
    // GGML_F32x8_REDUCE: (0+4, ..., 3+7), then hadd twice: (0+1) + (2+3).
    foldFourAccumulators(acc, 8, d);
    for (int l = 0; l < 4; ++l) addRows(acc + l * d, acc + (l + 4) * d, d);
    addRows(acc, acc + d, d);
    addRows(acc + 2 * d, acc + 3 * d, d);
    std::memcpy(acc + d, acc + 2 * d, size_t(d) * sizeof(float));
  }
  for (int64_t e = 0; e < d; ++e) out[e] = acc[e] + acc[d + e];
}

}  // namespace avx2
#pragma GCC pop_options

constexpr GgmlVec kAvx512{"avx512", 16, avx512::dot, avx512::weightedSum,
                          avx512::softMax, avx512::swiglu, avx512::silu};
constexpr GgmlVec kAvx2{"avx2", 8, avx2::dot, avx2::weightedSum,
                        avx2::softMax, avx2::swiglu, avx2::silu};
#endif

constexpr GgmlVec kScalar{"scalar", 1, scalar::dot, scalar::weightedSum,
                          scalar::softMax, scalar::swiglu, scalar::silu};

// Widest first; ggml's build takes the widest its machine has.
#if KILN_GGML_X86
constexpr const GgmlVec* kVariants[] = {&kAvx512, &kAvx2, &kScalar};
#else
constexpr const GgmlVec* kVariants[] = {&kScalar};
#endif

GgmlVec& chosen() {
  static GgmlVec v = [] {
    for (const GgmlVec* variant : kVariants)
      if (cpuHasIsa(variant->isa)) return *variant;
    return kScalar;
  }();
  return v;
}

}  // namespace

const GgmlVec& ggmlVec() { return chosen(); }

bool setGgmlVecIsaForTesting(const char* isa) {
  for (const GgmlVec* variant : kVariants)
    if (std::strcmp(variant->isa, isa) == 0 && cpuHasIsa(isa)) {
      chosen() = *variant;
      return true;
    }
  return false;
}

}  // namespace kiln::cpu
