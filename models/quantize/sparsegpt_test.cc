// SparseGPT's 2:4 pruning on the small random layer of
// test/fixtures/quant/gptq-awq (correlated inputs, loud channels), against
// test/fixtures/quant/sparsegpt from test/reference/make_sparsegpt_fixtures.py,
// a float64 NumPy implementation: the same weights kept, the same values,
// at most two nonzeros in every group of four, and the layer's output error
// over the inputs below magnitude pruning's.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "models/quantize/input_statistics.h"
#include "models/quantize/sparsegpt.h"
#include "models/quantize/testing/fixture_layer.h"
#include "test/source_root.h"

namespace kiln::quantize {
namespace {

const std::string kFixture = checkoutPath("test/fixtures/quant/sparsegpt");

// Groups of four consecutive columns with more than two nonzeros.
int denseGroups(const std::vector<double>& w) {
  int dense = 0;
  for (size_t i = 0; i < w.size(); i += 4)
    dense += (w[i] != 0.0) + (w[i + 1] != 0.0) + (w[i + 2] != 0.0) + (w[i + 3] != 0.0) > 2;
  return dense;
}

class SparseGptTest : public testing::FixtureLayerTest {
 protected:
  SparseGptTest() : FixtureLayerTest(kFixture + "/expected.json") {}

  double loss(const std::vector<double>& pruned) {
    return outputError(w64_.data(), pruned.data(), rows_, cols_, h_.data());
  }
};

TEST_F(SparseGptTest, MatchesTheReferenceAndBeatsMagnitudePruning) {
  const size_t n = size_t(rows_ * cols_);
  const auto& cases = doc_["cases"];
  ASSERT_EQ(cases.size(), 3u);
  const std::vector<double> all = testing::readBinary<double>(kFixture + "/pruned.f64.bin", n * cases.size());
  std::vector<double> magnitude(n);
  magnitudePrune24(w64_.data(), rows_, cols_, magnitude.data());
  EXPECT_EQ(denseGroups(magnitude), 0);
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    SparseGptOptions options;
    options.damp = c["damp"];
    options.block = c["block"];
    const std::string name = "damp " + c["damp"].dump() + " block " + c["block"].dump();
    auto pruned = sparseGptPrune(w_.data(), rows_, cols_, h_.data(), options);
    ASSERT_TRUE(pruned.ok()) << name << ": " << pruned.error().message;
    ASSERT_EQ(pruned->size(), n);
    const double* want = &all[k * n];
    int mask_mismatches = 0, value_mismatches = 0;
    for (size_t i = 0; i < n; ++i) {
      mask_mismatches += ((*pruned)[i] == 0.0) != (want[i] == 0.0);
      value_mismatches += std::fabs((*pruned)[i] - want[i]) > 1e-9 * std::fabs(want[i]);
    }
    EXPECT_EQ(mask_mismatches, 0) << name;
    EXPECT_EQ(value_mismatches, 0) << name;
    EXPECT_EQ(denseGroups(*pruned), 0) << name;
    const double got = loss(*pruned);
    EXPECT_NEAR(got, c["loss"].get<double>(), 1e-9 * c["loss"].get<double>()) << name;
    EXPECT_NEAR(loss(magnitude), c["magnitude_loss"].get<double>(),
                1e-9 * c["magnitude_loss"].get<double>());
    EXPECT_LT(got, loss(magnitude)) << name << ": no better than magnitude pruning";
  }
}

TEST_F(SparseGptTest, OnIdentityHessianWithoutDampeningIsMagnitudePruning) {
  // With H = I no column's error reaches another and U = I: the scores are
  // w^2, and the kept weights keep their values.
  std::vector<double> identity(size_t(cols_ * cols_), 0.0);
  for (int64_t i = 0; i < cols_; ++i) identity[size_t(i * cols_ + i)] = 1.0;
  SparseGptOptions options;
  options.damp = 0.0;
  auto pruned = sparseGptPrune(w_.data(), rows_, cols_, identity.data(), options);
  ASSERT_TRUE(pruned.ok()) << pruned.error().message;
  std::vector<double> magnitude(w64_.size());
  magnitudePrune24(w64_.data(), rows_, cols_, magnitude.data());
  EXPECT_EQ(*pruned, magnitude);
}

TEST_F(SparseGptTest, DeadColumnsArePrunedAndBadShapesAreErrors) {
  std::vector<double> h(h_);
  for (int64_t i = 0; i < cols_; ++i) h[size_t(i * cols_ + 5)] = h[size_t(5 * cols_ + i)] = 0.0;
  auto pruned = sparseGptPrune(w_.data(), rows_, cols_, h.data(), SparseGptOptions{});
  ASSERT_TRUE(pruned.ok()) << pruned.error().message;
  for (int64_t r = 0; r < rows_; ++r) EXPECT_EQ((*pruned)[size_t(r * cols_ + 5)], 0.0) << r;
  EXPECT_EQ(denseGroups(*pruned), 0);

  auto ragged = sparseGptPrune(w_.data(), rows_ * 2, cols_ / 2 - 2, h_.data(), SparseGptOptions{});
  ASSERT_FALSE(ragged.ok());
  EXPECT_NE(ragged.error().message.find("not whole groups of 4"), std::string::npos)
      << ragged.error().message;
}

TEST(KeptOfFour, TwoLargestTiesToTheLowerColumn) {
  const double distinct[4] = {0.1, 3.0, 2.0, 0.5};
  EXPECT_EQ(keptOfFour(distinct), 0b0110u);
  const double ties[4] = {1.0, 1.0, 1.0, 1.0};
  EXPECT_EQ(keptOfFour(ties), 0b0011u);
  const double zeros[4] = {0.0, 0.0, 0.0, 2.0};
  EXPECT_EQ(keptOfFour(zeros), 0b1001u);
}

}  // namespace
}  // namespace kiln::quantize
