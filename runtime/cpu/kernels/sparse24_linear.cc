#include "runtime/cpu/kernels/sparse24_linear.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/cpu/kernels/linear.h"
#include "runtime/numerics/quant.h"
#include "runtime/numerics/sparse24_layout.h"
#include "runtime/support/thread_pool.h"

namespace kiln::cpu {

Status sparse24Linear(const float* x, int64_t tokens, int64_t k, const void* values, WeightType values_type,
                      const void* meta, int64_t n, const float* bias, float* y) {
  if (tokens < 0 || n <= 0 || k <= 0 || k % kSparse24Span != 0)
    return makeError("sparse24 linear: shape tokens={} k={} n={} is invalid: expected k a positive multiple of {}",
                     tokens, k, n, kSparse24Span);
  if (values_type != WeightType::F32 && values_type != WeightType::Q8_0 && values_type != WeightType::Q4_0)
    return makeError("sparse24 linear: kept values of type {}, expected f32, q8_0 or q4_0",
                     weightTypeName(values_type));
  if (k > INT32_MAX || n > INT32_MAX || tokens > INT32_MAX)
    return makeError("sparse24 linear: shape tokens={} k={} n={} exceeds the BLAS int range", tokens, k, n);
  if (tokens == 0) return Status::success();
  if (!x || !values || !meta || !y) return makeError("sparse24 linear: x, values, meta and y must be non-null");

  pinBlasToOneThread();
  const int64_t half = k / 2, words = k / kSparse24WordColumns;
  const int64_t value_row_bytes = rowBytes(values_type, half);
  const auto* value_bytes = static_cast<const uint8_t*>(values);
  const auto* meta_bytes = static_cast<const uint8_t*>(meta);
  // A tile of expanded rows of ~256 KiB stays in L2 while sgemm streams x past it.
  const int64_t tile = std::clamp<int64_t>((256 << 10) / (k * 4), 16, 256);
  parallelFor(n, tile, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> dense, kept;
    thread_local std::vector<uint32_t> row_meta;
    kept.resize(size_t(half));
    row_meta.resize(size_t(words));
    for (int64_t t0 = r0; t0 < r1; t0 += tile) {
      const int64_t rows = std::min(tile, r1 - t0);
      dense.assign(size_t(rows * k), 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = t0 + r;
        (void)dequantizeRow(values_type, value_bytes + row * value_row_bytes, kept.data(), half);
        std::memcpy(row_meta.data(), meta_bytes + row * words * 4, size_t(words) * 4);
        float* out = dense.data() + r * k;
        for (int64_t g = 0; g < k / 4; ++g) {
          int i0, i1;
          sparse24Pair(row_meta.data(), g, i0, i1);
          out[4 * g + i0] = kept[size_t(2 * g)];
          out[4 * g + i1] = kept[size_t(2 * g + 1)];
        }
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(tokens), int(rows), int(k), 1.0f, x, int(k),
                  dense.data(), int(k), 0.0f, y + t0, int(n));
    }
  });
  if (bias)
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t j = 0; j < n; ++j) y[t * n + j] += bias[j];
  return Status::success();
}

}  // namespace kiln::cpu
