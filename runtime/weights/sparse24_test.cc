#include "runtime/weights/sparse24.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/numerics/quant.h"
#include "runtime/numerics/testing.h"
#include "runtime/numerics/weight_type.h"

namespace kiln {
namespace {

std::vector<float> randomMatrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  return testing::randomFloats(rng, size_t(rows * cols));
}

// The magnitude-pruned matrix by another route: each group's columns sorted
// by decreasing |w| (stable, so ties keep the lower column), the last two
// zeroed.
std::vector<float> prunedBySorting(const std::vector<float>& w) {
  std::vector<float> out = w;
  for (size_t g = 0; g < w.size(); g += 4) {
    std::vector<int> order(4);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return std::fabs(w[g + a]) > std::fabs(w[g + b]); });
    out[g + order[2]] = 0.0f;
    out[g + order[3]] = 0.0f;
  }
  return out;
}

TEST(Sparse24, MagnitudeKeepsTheTwoLargestOfEachGroup) {
  const int64_t rows = 5, cols = 128;
  std::vector<float> w = randomMatrix(rows, cols, 3);
  // Ties: equal magnitudes keep the lower columns.
  w[0] = 1.0f, w[1] = -1.0f, w[2] = 1.0f, w[3] = 0.5f;
  auto m = compressSparse24(w.data(), rows, cols, "magnitude", "w");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->values.size(), size_t(rows * cols / 2));
  EXPECT_EQ(m->meta.size(), size_t(rows * cols / 32));
  EXPECT_EQ(expandSparse24(*m), prunedBySorting(w));
  // Group 0 of row 0 keeps columns 0 and 1: nibble 0 | 1 << 2.
  EXPECT_EQ(m->meta[0] & 0xF, 0x4u);
  EXPECT_EQ(m->values[0], 1.0f);
  EXPECT_EQ(m->values[1], -1.0f);
}

TEST(Sparse24, SparseGptWeightsKeepTheirNonzerosAndRefuseAThirdOne) {
  const int64_t rows = 3, cols = 64;
  std::vector<float> w = prunedBySorting(randomMatrix(rows, cols, 5));
  w[size_t(cols + 8)] = 0.0f;  // a group with a single nonzero stays as it is
  auto m = compressSparse24(w.data(), rows, cols, "sparsegpt", "w");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(expandSparse24(*m), w);

  // Row 2, group 5: a third nonzero.
  const size_t at = size_t(2 * cols + 20);
  w[at] = w[at + 1] = w[at + 2] = 0.25f;
  auto bad = compressSparse24(w.data(), rows, cols, "sparsegpt", "blk.3.ffn_up.weight");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("blk.3.ffn_up.weight: row 2, columns 20..23 hold 3 nonzeros"),
            std::string::npos)
      << bad.error().message;
}

TEST(Sparse24, RefusesShapesThatAreNotWholeSpans) {
  std::vector<float> w(2 * 96, 1.0f);
  auto m = compressSparse24(w.data(), 2, 96, "magnitude", "w96");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("w96: a 2:4 sparse weight needs whole 64-column spans, got shape [2, 96]"),
            std::string::npos)
      << m.error().message;
}

// Packed values dequantize to the kept values within the scheme's grid, and
// the metadata plane follows them unchanged.
TEST(Sparse24, PacksTheKeptValuesInEachScheme) {
  const int64_t rows = 4, cols = 256;
  std::vector<float> w = randomMatrix(rows, cols, 9);
  auto m = compressSparse24(w.data(), rows, cols, "magnitude", "w");
  ASSERT_TRUE(m.ok());
  struct Case {
    const char* scheme;
    int64_t group;
    WeightType values;
    size_t scales;
    double step;  // the grid's spacing relative to the group's max |v|
  };
  for (const Case& c : {Case{"sp24", 0, WeightType::F32, 0, 0.0}, Case{"int8sp24", 0, WeightType::Q8_0, 4, 1 / 127.0},
                        Case{"int4sp24", 128, WeightType::Q4_0, 8, 1 / 7.0}}) {
    SCOPED_TRACE(c.scheme);
    auto packed = packSparse24(*m, c.scheme, c.group);
    ASSERT_TRUE(packed.ok()) << packed.error().message;
    EXPECT_EQ(packed->scales.size(), c.scales);
    EXPECT_EQ(packed->meta_offset, uint64_t(rowBytes(c.values, cols / 2) * rows));
    EXPECT_EQ(packed->bytes, packed->meta_offset + m->meta.size() * 4);
    std::vector<uint32_t> meta(m->meta.size());
    std::memcpy(meta.data(), packed->data.get() + packed->meta_offset, meta.size() * 4);
    EXPECT_EQ(meta, m->meta);
    std::vector<float> back(size_t(rows * cols / 2));
    ASSERT_TRUE(dequantizeRow(c.values, packed->data.get(), back.data(), int64_t(back.size())).ok());
    const int64_t span = c.group ? c.group / 2 : cols / 2;  // kept values sharing a scale
    for (size_t i = 0; i < back.size(); i += size_t(span)) {
      float amax = 0;
      for (int64_t j = 0; j < span; ++j) amax = std::max(amax, std::fabs(m->values[i + size_t(j)]));
      for (int64_t j = 0; j < span; ++j)
        EXPECT_NEAR(back[i + size_t(j)], m->values[i + size_t(j)], amax * (c.step / 2 + 1e-3) + 1e-7);
    }
  }
  EXPECT_FALSE(packSparse24(*m, "int4sp24", 96).ok());
  EXPECT_FALSE(packSparse24(*m, "fp8sp24", 0).ok());
}

}  // namespace
}  // namespace kiln
