// Random 2:4 sparse weights for the sparse GPU test and bench, prepared as
// docs/design/sparsity.md lays them out (kept values in bf16, q8_0 or q4_0
// blocks, then the canonical metadata from the next 16-byte boundary), with
// the mma-order metadata the GEMM takes and the dense matrix the kernels
// compute with (the kept values as stored, dequantized; zeros elsewhere).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "codegen/kernels/sparse24_params.cuh"
#include "runtime/cuda/executor/sparse24_layout.h"
#include "runtime/numerics/quant.h"
#include "test/gpu/gpu_harness.h"

namespace kiln::gpu_test {

struct Sparse24Weight {
  int64_t n = 0, k = 0;
  std::vector<uint8_t> prepared;      // values plane, then the canonical metadata plane
  int64_t metadata_offset = 0;        // bytes into `prepared`
  std::vector<uint32_t> mma_metadata; // [ceil(n/16), k/64, 32]
  std::vector<float> dense;           // [n, k]; empty unless asked for
};

// Bytes of one row of kept values stored as `values` (bf16, q8_0, q4_0).
inline int64_t sparse24RowBytes(const std::string& values, int64_t k) {
  namespace kk = kiln::kernels;
  if (values == "q8_0") return kk::sparse24_row_bytes<kk::Sparse24Q8_0>(k);
  if (values == "q4_0") return kk::sparse24_row_bytes<kk::Sparse24Q4_0>(k);
  return kk::sparse24_row_bytes<kk::Sparse24Bf16>(k);
}

// W [n, k] with a random pair kept in each group of four, kept values drawn
// uniformly with standard deviation sigma; with_dense keeps the dense matrix
// for a reference.
inline Sparse24Weight randomSparse24Weight(const std::string& values, int64_t n, int64_t k, float sigma,
                                           std::mt19937& rng, bool with_dense) {
  static constexpr int kPairs[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
  Sparse24Weight w;
  w.n = n;
  w.k = k;
  const int64_t row_bytes = sparse24RowBytes(values, k);
  w.metadata_offset = cuda::sparse24MetadataOffset(n, row_bytes);
  w.prepared.assign(size_t(w.metadata_offset + n * k / 8), 0);
  if (with_dense) w.dense.assign(size_t(n * k), 0.0f);
  std::uniform_real_distribution<float> uniform(-1.7320508f * sigma, 1.7320508f * sigma);
  std::vector<float> kept(size_t(k / 2)), stored(size_t(k / 2));
  std::vector<int> pair(size_t(k / 4));
  auto* meta = reinterpret_cast<uint32_t*>(w.prepared.data() + w.metadata_offset);
  for (int64_t r = 0; r < n; ++r) {
    uint8_t* row = w.prepared.data() + r * row_bytes;
    for (int64_t g = 0; g < k / 4; ++g) {
      pair[size_t(g)] = int(rng() % 6);
      meta[r * (k / 32) + g / 8] |= uint32_t(kPairs[pair[size_t(g)]][0] | kPairs[pair[size_t(g)]][1] << 2)
                                    << (4 * (g % 8));
    }
    for (float& v : kept) v = uniform(rng);
    if (values == "bf16") {
      auto* bits = reinterpret_cast<uint16_t*>(row);
      for (size_t i = 0; i < kept.size(); ++i) {
        bits[i] = toBf16(kept[i]);
        stored[i] = fromBf16(bits[i]);
      }
    } else {
      const WeightType type = values == "q8_0" ? WeightType::Q8_0 : WeightType::Q4_0;
      (void)quantizeRow(type, kept.data(), row, k / 2);
      (void)dequantizeRow(type, row, stored.data(), k / 2);
    }
    if (with_dense)
      for (int64_t g = 0; g < k / 4; ++g)
        for (int e = 0; e < 2; ++e)
          w.dense[size_t(r * k + 4 * g + kPairs[pair[size_t(g)]][e])] = stored[size_t(2 * g + e)];
  }
  w.mma_metadata = cuda::sparse24MmaMetadata(meta, n, k);
  return w;
}

}  // namespace kiln::gpu_test
