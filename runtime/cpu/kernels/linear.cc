#include "runtime/cpu/kernels/linear.h"

#include <atomic>

#include <cblas.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "runtime/cpu/kernels/quant_dot.h"
#include "runtime/numerics/quant.h"
#include "runtime/support/thread_pool.h"

namespace kiln::cpu {

void pinBlasToOneThread() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

namespace {

// Per-thread scratch that grows to the largest request and is then reused, so
// steady-state decode does not allocate.
template <typename T>
T* scratch(std::vector<T>& buffer, size_t count) {
  if (buffer.size() < count) buffer.resize(count);
  return buffer.data();
}

void addBias(float* y, int64_t tokens, int64_t n, const float* bias) {
  if (!bias) return;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < n; ++j) y[t * n + j] += bias[j];
}

// K-quant weights: the same split over W rows, against 256-element
// activation blocks.
void linearKQuantDot(const float* x, int64_t tokens, int64_t k, const void* w, WeightType w_type,
                     int64_t n, float* y) {
  thread_local std::vector<ActivationQ8K> activation_buffer;
  const int64_t nsb = k / kSuperBlock;
  ActivationQ8K* a = scratch(activation_buffer, size_t(tokens * nsb));
  for (int64_t t = 0; t < tokens; ++t) quantizeActivationQ8K(x + t * k, a + t * nsb, k);
  const int64_t row_bytes = rowBytes(w_type, k);
  const auto* wbytes = static_cast<const uint8_t*>(w);
  parallelFor(n, 16, [&](int64_t r0, int64_t r1) {
    kQuantDotRows(w_type, wbytes + r0 * row_bytes, r1 - r0, k, a, tokens, y + r0, n);
  });
}

void linearQuantDot(const float* x, int64_t tokens, int64_t k, const void* w, WeightType w_type,
                    int64_t n, float* y) {
  if (isKQuant(w_type)) return linearKQuantDot(x, tokens, k, w, w_type, n, y);
  thread_local std::vector<ActivationQ8> activation_buffer;
  const int64_t nb = k / kQuantBlock;
  ActivationQ8* a = scratch(activation_buffer, size_t(tokens * nb));
  for (int64_t t = 0; t < tokens; ++t) quantizeActivationQ8(x + t * k, a + t * nb, k);
  const int64_t row_bytes = rowBytes(w_type, k);
  const auto* wbytes = static_cast<const uint8_t*>(w);
  parallelFor(n, 16, [&](int64_t r0, int64_t r1) {
    quantDotRows(w_type, wbytes + r0 * row_bytes, r1 - r0, k, a, tokens, y + r0, n);
  });
}

void linearSgemm(const float* x, int64_t tokens, int64_t k, const void* w, WeightType w_type,
                 int64_t n, float* y) {
  pinBlasToOneThread();
  const auto* wbytes = static_cast<const uint8_t*>(w);
  const int64_t row_bytes = rowBytes(w_type, k);
  // A converted tile of ~256 KiB stays in L2 while sgemm streams x past it.
  const int64_t tile = std::clamp<int64_t>((256 << 10) / (k * 4), 16, 256);
  parallelFor(n, tile, [&](int64_t r0, int64_t r1) {
    if (w_type == WeightType::F32) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(tokens), int(r1 - r0), int(k),
                  1.0f, x, int(k), reinterpret_cast<const float*>(wbytes + r0 * row_bytes),
                  int(k), 0.0f, y + r0, int(n));
      return;
    }
    thread_local std::vector<float> tile_buffer;
    for (int64_t t0 = r0; t0 < r1; t0 += tile) {
      const int64_t rows = std::min(tile, r1 - t0);
      float* wt = scratch(tile_buffer, size_t(rows * k));
      for (int64_t r = 0; r < rows; ++r)
        (void)dequantizeRow(w_type, wbytes + (t0 + r) * row_bytes, wt + r * k, k);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(tokens), int(rows), int(k), 1.0f,
                  x, int(k), wt, int(k), 0.0f, y + t0, int(n));
    }
  });
}

}  // namespace

namespace {
std::atomic<LinearPath>& quantizedWeightPathSlot() {
  static std::atomic<LinearPath> path{LinearPath::kQuantDot};
  return path;
}
LinearPath quantizedWeightPath() { return quantizedWeightPathSlot().load(std::memory_order_relaxed); }
}  // namespace

void setQuantizedWeightPath(LinearPath path) {
  quantizedWeightPathSlot().store(path == LinearPath::kAuto ? LinearPath::kQuantDot : path,
                                  std::memory_order_relaxed);
}

Status linearWithPath(const float* x, int64_t tokens, int64_t k, const void* w,
                      WeightType w_type, int64_t n, const float* bias, float* y,
                      LinearPath path) {
  if (tokens < 0 || k <= 0 || n <= 0)
    return makeError("linear: shape tokens={} k={} n={} is invalid: expected tokens >= 0, k > 0, n > 0",
                     tokens, k, n);
  if (k % quantBlockElements(w_type) != 0)
    return makeError("linear: {} weight with k={} is invalid: expected k a multiple of {}",
                     weightTypeName(w_type), k, quantBlockElements(w_type));
  if (k > INT32_MAX || n > INT32_MAX || tokens > INT32_MAX)
    return makeError("linear: shape tokens={} k={} n={} exceeds the BLAS int range", tokens, k, n);
  if (tokens == 0) return Status::success();
  if (!x || !w || !y) return makeError("linear: x, w and y must be non-null");

  if (path == LinearPath::kAuto)
    path = isQuantized(w_type) ? quantizedWeightPath() : LinearPath::kDequantSgemm;
  if (path == LinearPath::kQuantDot && !isQuantized(w_type))
    return makeError("linear: the quantized dot path needs a q4_0/q4_1/q8_0/q4_k/q5_k/q6_k "
                     "weight, got {}",
                     weightTypeName(w_type));
  if (path == LinearPath::kQuantDot)
    linearQuantDot(x, tokens, k, w, w_type, n, y);
  else
    linearSgemm(x, tokens, k, w, w_type, n, y);
  addBias(y, tokens, n, bias);
  return Status::success();
}

const char* blasCoreName() { return openblas_get_corename(); }

Status linear(const float* x, int64_t tokens, int64_t k, const void* w, WeightType w_type,
              int64_t n, const float* bias, float* y) {
  return linearWithPath(x, tokens, k, w, w_type, n, bias, y, LinearPath::kAuto);
}

}  // namespace kiln::cpu
