#include "runtime/cpu/kernels/ggml_vec.h"

#include <cmath>
#include <cstring>
#include <vector>

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

double softMax(float* y, const float* x, int64_t n, float max) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float val = std::exp(x[i] - max);
    sum += double(val);
    y[i] = val;
  }
  return sum;
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
inline __m512 expf16(__m512 x) {
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

// ggml_v_silu: x / (1 + exp(-x)).
inline __m512 silu16(__m512 x) {
  const __m512 neg_x = _mm512_sub_ps(_mm512_setzero_ps(), x);
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), expf16(neg_x)));
}

float dot(const float* x, const float* y, int64_t n) {
  const int64_t np = n & ~int64_t(63);
  __m512 sum[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j)
      sum[j] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16 * j), _mm512_loadu_ps(y + i + 16 * j),
                               sum[j]);
  sum[0] = _mm512_add_ps(sum[0], sum[2]);
  sum[1] = _mm512_add_ps(sum[1], sum[3]);
  sum[0] = _mm512_add_ps(sum[0], sum[1]);
  float sumf = reduceAdd(sum[0]);
  // ggml's `sumf += x[i]*y[i]`, which GCC contracts into an FMA.
  for (int64_t i = np; i < n; ++i) sumf = std::fma(x[i], y[i], sumf);
  return sumf;
}

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

double softMax(float* y, const float* x, int64_t n, float max) {
  int64_t i = 0;
  double sum = 0.0;
  for (; i + 15 < n; i += 16) {
    const __m512 val = expf16(_mm512_sub_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(max)));
    _mm512_storeu_ps(y + i, val);
    sum += double(reduceAdd(val));
  }
  for (; i < n; ++i) {
    const float val = std::exp(x[i] - max);
    sum += double(val);
    y[i] = val;
  }
  return sum;
}

void swiglu(float* y, const float* x, const float* g, int64_t n) {
  int64_t i = 0;
  for (; i + 15 < n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_mul_ps(silu16(_mm512_loadu_ps(x + i)), _mm512_loadu_ps(g + i)));
  for (; i < n; ++i) y[i] = scalar::siluOne(x[i]) * g[i];
}

void silu(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 15 < n; i += 16) _mm512_storeu_ps(y + i, silu16(_mm512_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = scalar::siluOne(x[i]);
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

// ggml_v_expf (AVX2).
inline __m256 expf8(__m256 x) {
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

inline __m256 silu8(__m256 x) {
  const __m256 neg_x = _mm256_sub_ps(_mm256_setzero_ps(), x);
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), expf8(neg_x)));
}

float dot(const float* x, const float* y, int64_t n) {
  const int64_t np = n & ~int64_t(31);
  __m256 sum[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  for (int64_t i = 0; i < np; i += 32)
    for (int j = 0; j < 4; ++j)
      sum[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * j), _mm256_loadu_ps(y + i + 8 * j),
                               sum[j]);
  sum[0] = _mm256_add_ps(sum[0], sum[2]);
  sum[1] = _mm256_add_ps(sum[1], sum[3]);
  sum[0] = _mm256_add_ps(sum[0], sum[1]);
  // GGML_F32x8_REDUCE's tail: halves, then two horizontal adds.
  const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(sum[0]), _mm256_extractf128_ps(sum[0], 1));
  const __m128 t1 = _mm_hadd_ps(t0, t0);
  float sumf = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
  for (int64_t i = np; i < n; ++i) sumf = std::fma(x[i], y[i], sumf);
  return sumf;
}

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

double softMax(float* y, const float* x, int64_t n, float max) {
  int64_t i = 0;
  double sum = 0.0;
  for (; i + 7 < n; i += 8) {
    const __m256 val = expf8(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(max)));
    _mm256_storeu_ps(y + i, val);
    sum += double(hsum8(val));
  }
  for (; i < n; ++i) {
    const float val = std::exp(x[i] - max);
    sum += double(val);
    y[i] = val;
  }
  return sum;
}

void swiglu(float* y, const float* x, const float* g, int64_t n) {
  int64_t i = 0;
  for (; i + 7 < n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(silu8(_mm256_loadu_ps(x + i)), _mm256_loadu_ps(g + i)));
  for (; i < n; ++i) y[i] = scalar::siluOne(x[i]) * g[i];
}

void silu(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 7 < n; i += 8) _mm256_storeu_ps(y + i, silu8(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = scalar::siluOne(x[i]);
}

}  // namespace avx2
#pragma GCC pop_options

bool cpuHas(const char* isa) {
  __builtin_cpu_init();
  if (std::strcmp(isa, "scalar") == 0) return true;
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (std::strcmp(isa, "avx2") == 0) return avx2;
  if (std::strcmp(isa, "avx512") == 0)
    return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
  return false;
}

constexpr GgmlVec kAvx512{"avx512", 16, avx512::dot, avx512::weightedSum,
                          avx512::softMax, avx512::swiglu, avx512::silu};
constexpr GgmlVec kAvx2{"avx2", 8, avx2::dot, avx2::weightedSum,
                        avx2::softMax, avx2::swiglu, avx2::silu};
#else
bool cpuHas(const char* isa) { return std::strcmp(isa, "scalar") == 0; }
#endif

constexpr GgmlVec kScalar{"scalar", 1, scalar::dot, scalar::weightedSum,
                          scalar::softMax, scalar::swiglu, scalar::silu};

const GgmlVec& variant(const char* isa) {
#if KILN_GGML_X86
  if (std::strcmp(isa, "avx512") == 0) return kAvx512;
  if (std::strcmp(isa, "avx2") == 0) return kAvx2;
#endif
  (void)isa;
  return kScalar;
}

GgmlVec& chosen() {
  static GgmlVec v = [] {
    for (const char* isa : {"avx512", "avx2"})
      if (cpuHas(isa)) return variant(isa);
    return kScalar;
  }();
  return v;
}

}  // namespace

const GgmlVec& ggmlVec() { return chosen(); }

bool setGgmlVecIsaForTesting(const char* isa) {
  if (!cpuHas(isa)) return false;
  chosen() = variant(isa);
  return true;
}

}  // namespace kiln::cpu
