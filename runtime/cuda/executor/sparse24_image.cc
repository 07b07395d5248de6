#include "runtime/cuda/executor/sparse24_image.h"

#include <cstring>

#include "runtime/cuda/executor/kiln_assign.h"
#include "runtime/cuda/executor/sparse24_layout.h"
#include "runtime/numerics/sparse24_layout.h"
#include "runtime/numerics/quant.h"

namespace kiln::cuda {

namespace {

int64_t rowsOf(const BoundWeight& w) { return w.shape[0]; }
int64_t colsOf(const BoundWeight& w) { return w.shape[1]; }

// The canonical metadata [n, k/32], copied out of the store's unaligned plane.
std::vector<uint32_t> canonicalMetadata(const BoundWeight& w) {
  std::vector<uint32_t> meta(size_t(rowsOf(w) * colsOf(w) / kSparse24WordColumns));
  std::memcpy(meta.data(), w.data + w.sparse_meta_offset, meta.size() * sizeof(uint32_t));
  return meta;
}

}  // namespace

int64_t sparse24GemvRowBytes(const BoundWeight& w) {
  const int64_t k = colsOf(w);
  if (w.type == WeightType::Q8_0) return k / kSparse24Span * int64_t(sizeof(BlockQ8_0));
  if (w.type == WeightType::Q4_0) return k / kSparse24Span * int64_t(sizeof(BlockQ4_0));
  return k / 2 * 2;  // bf16
}

int64_t sparse24GemvImageBytes(const BoundWeight& w) {
  return sparse24MetadataOffset(rowsOf(w), sparse24GemvRowBytes(w)) +
         rowsOf(w) * colsOf(w) / kSparse24WordColumns * int64_t(sizeof(uint32_t));
}

Result<std::vector<uint8_t>> sparse24GemvImage(const BoundWeight& w) {
  const int64_t n = rowsOf(w), k = colsOf(w);
  const int64_t values_bytes = n * sparse24GemvRowBytes(w);
  std::vector<uint8_t> image(size_t(sparse24GemvImageBytes(w)), 0);
  if (w.type == WeightType::F32) {
    KILN_ASSIGN(values, sparse24KeptValues(w));
    KILN_RETURN_IF_ERROR(quantizeRow(WeightType::BF16, values.data(), image.data(), n * k / 2));
  } else {
    std::memcpy(image.data(), w.data, size_t(values_bytes));
  }
  const std::vector<uint32_t> meta = canonicalMetadata(w);
  std::memcpy(image.data() + sparse24MetadataOffset(n, sparse24GemvRowBytes(w)), meta.data(),
              meta.size() * sizeof(uint32_t));
  return image;
}

std::vector<uint8_t> sparse24MmaImage(const BoundWeight& w) {
  const std::vector<uint32_t> mma = sparse24MmaMetadata(canonicalMetadata(w).data(), rowsOf(w), colsOf(w));
  std::vector<uint8_t> image(mma.size() * sizeof(uint32_t));
  std::memcpy(image.data(), mma.data(), image.size());
  return image;
}

Result<std::vector<float>> sparse24KeptValues(const BoundWeight& w) {
  std::vector<float> values(size_t(rowsOf(w) * colsOf(w) / 2));
  KILN_RETURN_IF_ERROR(dequantizeRow(w.type, w.data, values.data(), int64_t(values.size())));
  return values;
}

Result<std::vector<float>> sparse24Dense(const BoundWeight& w) {
  const int64_t n = rowsOf(w), k = colsOf(w);
  KILN_ASSIGN(values, sparse24KeptValues(w));
  const std::vector<uint32_t> meta = canonicalMetadata(w);
  std::vector<float> dense(size_t(n * k), 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    const uint32_t* row_meta = meta.data() + r * (k / kSparse24WordColumns);
    for (int64_t g = 0; g < k / 4; ++g) {
      int i0 = 0, i1 = 0;
      sparse24Pair(row_meta, g, i0, i1);
      dense[size_t(r * k + 4 * g + i0)] = values[size_t(r * k / 2 + 2 * g)];
      dense[size_t(r * k + 4 * g + i1)] = values[size_t(r * k / 2 + 2 * g + 1)];
    }
  }
  return dense;
}

}  // namespace kiln::cuda
