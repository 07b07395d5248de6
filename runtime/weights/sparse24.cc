#include "runtime/weights/sparse24.h"

#include <cmath>
#include <cstring>

#include "runtime/weights/weight_quantization.h"

namespace kiln {

Result<Sparse24Matrix> compressSparse24(const float* w, int64_t rows, int64_t cols, std::string_view method,
                                        std::string_view name) {
  if (rows <= 0 || cols <= 0 || cols % kSparse24Span != 0)
    return makeError("{}: a 2:4 sparse weight needs whole {}-column spans, got shape [{}, {}]", name,
                     kSparse24Span, rows, cols);
  const bool pruned = method == "sparsegpt";
  if (!pruned && method != "magnitude")
    return makeError("{}: unknown 2:4 method '{}', expected magnitude or sparsegpt", name, method);
  Sparse24Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.values.resize(size_t(rows * cols / 2));
  m.meta.assign(size_t(rows * cols / kSparse24WordColumns), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    float* kept = m.values.data() + r * cols / 2;
    uint32_t* meta = m.meta.data() + r * cols / kSparse24WordColumns;
    for (int64_t g = 0; g < cols / 4; ++g) {
      const float* x = row + 4 * g;
      if (pruned) {
        int nonzeros = 0;
        for (int j = 0; j < 4; ++j) nonzeros += x[j] != 0.0f;
        if (nonzeros > 2)
          return makeError(
              "{}: row {}, columns {}..{} hold {} nonzeros, expected at most 2 (the weight was compiled with "
              "--sparsity-method=sparsegpt, which prunes it before the compile)",
              name, r, 4 * g, 4 * g + 3, nonzeros);
      }
      // The two largest magnitudes, the lower column first on ties.
      int first = 0;
      for (int j = 1; j < 4; ++j)
        if (std::fabs(x[j]) > std::fabs(x[first])) first = j;
      int second = first == 0 ? 1 : 0;
      for (int j = 0; j < 4; ++j)
        if (j != first && std::fabs(x[j]) > std::fabs(x[second])) second = j;
      const int i0 = std::min(first, second), i1 = std::max(first, second);
      kept[2 * g] = x[i0];
      kept[2 * g + 1] = x[i1];
      meta[g / 8] |= uint32_t(i0 | i1 << 2) << (4 * (g % 8));
    }
  }
  return m;
}

std::vector<float> expandSparse24(const Sparse24Matrix& m) {
  std::vector<float> dense(size_t(m.rows * m.cols), 0.0f);
  for (int64_t r = 0; r < m.rows; ++r) {
    const uint32_t* meta = m.meta.data() + r * m.cols / kSparse24WordColumns;
    for (int64_t g = 0; g < m.cols / 4; ++g) {
      int i0, i1;
      sparse24Pair(meta, g, i0, i1);
      dense[size_t(r * m.cols + 4 * g + i0)] = m.values[size_t(r * m.cols / 2 + 2 * g)];
      dense[size_t(r * m.cols + 4 * g + i1)] = m.values[size_t(r * m.cols / 2 + 2 * g + 1)];
    }
  }
  return dense;
}

Result<PackedSparse24> packSparse24(const Sparse24Matrix& m, std::string_view scheme, int64_t group) {
  PackedSparse24 out;
  const int64_t half = m.cols / 2;
  const uint64_t meta_bytes = m.meta.size() * sizeof(uint32_t);
  const uint8_t* values = nullptr;
  QuantizedWeight quantized;
  if (scheme == "sp24") {
    out.meta_offset = uint64_t(m.values.size()) * sizeof(float);
    values = reinterpret_cast<const uint8_t*>(m.values.data());
  } else if (scheme == "int8sp24" || scheme == "int4sp24") {
    const bool int4 = scheme == "int4sp24";
    if (int4 && (group <= 0 || group % kSparse24Span != 0 || m.cols % group != 0))
      return makeError("int4sp24 groups of {} input columns: expected a multiple of {} dividing {}", group,
                       kSparse24Span, m.cols);
    // A group of G dense columns keeps G / 2 values.
    auto q = quantizeWeight(int4 ? "int4" : "int8", int4 ? group / 2 : 0, m.values.data(), m.rows, half);
    if (!q.ok()) return q.error();
    quantized = q.take();
    out.values_type = quantized.packed_type;
    out.meta_offset = quantized.packed_bytes;
    out.scales = std::move(quantized.scales);
    values = quantized.packed.get();
  } else {
    return makeError("unknown 2:4 scheme '{}', expected sp24, int8sp24 or int4sp24", scheme);
  }
  out.bytes = out.meta_offset + meta_bytes;
  out.data = std::make_unique<uint8_t[]>(out.bytes);
  std::memcpy(out.data.get(), values, out.meta_offset);
  std::memcpy(out.data.get() + out.meta_offset, m.meta.data(), meta_bytes);
  return out;
}

}  // namespace kiln
