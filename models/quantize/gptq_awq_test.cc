// RTN, GPTQ and AWQ on a small random linear layer with correlated inputs
// (test/fixtures/quant/gptq-awq, from test/reference/make_gptq_awq_fixtures.py,
// a float64 NumPy implementation of the same algorithms): the codes, scales
// and zeros must be the reference's, and the layer's output error over the
// inputs below round-to-nearest's on the same grid.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "models/quantize/awq.h"
#include "models/quantize/gptq.h"
#include "models/quantize/input_statistics.h"
#include "models/quantize/int4_grid.h"
#include "models/quantize/testing/fixture_layer.h"
#include "runtime/numerics/quant.h"

namespace kiln::quantize {
namespace {

const std::string kFixture = checkoutPath("test/fixtures/quant/gptq-awq");

class GptqAwqTest : public testing::FixtureLayerTest {
 protected:
  GptqAwqTest() : FixtureLayerTest(kFixture + "/expected.json") {}

  // The case's expected codes, scales and zeros, and its output error.
  void expectLayer(const nlohmann::json& c, const formats::Int4Linear& got, double loss) {
    const std::string name = c["method"].get<std::string>() + " group " +
                             std::to_string(c["group"].get<int>()) + (c["sym"] ? " sym" : " asym");
    const auto codes = c["codes"].get<std::vector<int>>();
    const auto zeros = c["zeros"].get<std::vector<int>>();
    const auto scales = c["scales"].get<std::vector<double>>();
    ASSERT_EQ(got.codes.size(), codes.size()) << name;
    int code_mismatches = 0;
    for (size_t i = 0; i < codes.size(); ++i) code_mismatches += got.codes[i] != codes[i];
    EXPECT_EQ(code_mismatches, 0) << name;
    ASSERT_EQ(got.scales.size(), scales.size()) << name;
    for (size_t i = 0; i < scales.size(); ++i) {
      EXPECT_EQ(f16ToF32(got.scales[i]), scales[i]) << name << " scale " << i;
      EXPECT_EQ(int(got.zeros[i]), zeros[i]) << name << " zero " << i;
    }
    const double want = c["loss"], rtn = c["rtn_loss"];
    EXPECT_NEAR(loss, want, 1e-9 * want) << name;
    EXPECT_LT(loss, rtn) << name << ": no better than round to nearest";
  }

  // The layer's weights as `layer` gives them, divided by s when given.
  std::vector<double> values(const formats::Int4Linear& layer, const std::vector<double>& s = {}) {
    std::vector<double> v(size_t(rows_ * cols_));
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t c = 0; c < cols_; ++c)
        v[size_t(r * cols_ + c)] = double(layer.value(r, c)) / (s.empty() ? 1.0 : s[size_t(c)]);
    return v;
  }

  double rtnLoss(const Int4Options& grid) {
    return outputError(w64_.data(), values(int4Rtn(w64_.data(), rows_, cols_, grid)).data(), rows_,
                       cols_, h_.data());
  }

};

TEST_F(GptqAwqTest, RoundToNearestMatchesTheReference) {
  for (const auto& c : doc_["cases"]) {
    if (c["method"] != "rtn") continue;
    const Int4Options grid{.group = c["group"], .sym = c["sym"]};
    const formats::Int4Linear layer = int4Rtn(w64_.data(), rows_, cols_, grid);
    const auto codes = c["codes"].get<std::vector<int>>();
    for (size_t i = 0; i < codes.size(); ++i) ASSERT_EQ(int(layer.codes[i]), codes[i]) << i;
    EXPECT_NEAR(rtnLoss(grid), c["loss"].get<double>(), 1e-9 * c["loss"].get<double>());
  }
}

TEST_F(GptqAwqTest, GptqMatchesTheReferenceAndBeatsRoundToNearest) {
  int cases = 0;
  for (const auto& c : doc_["cases"]) {
    if (c["method"] != "gptq") continue;
    GptqOptions options;
    options.grid = {.group = c["group"], .sym = c["sym"]};
    options.act_order = c["act_order"];
    options.damp = doc_["damp"];
    options.block = doc_["block"];
    auto layer = gptqQuantize(w_.data(), rows_, cols_, h_.data(), options);
    ASSERT_TRUE(layer.ok()) << layer.error().message;
    EXPECT_TRUE(layer->groupsAreContiguous(options.grid.group)) << "act-order keeps static groups";
    const double loss = outputError(w64_.data(), values(*layer).data(), rows_, cols_, h_.data());
    expectLayer(c, *layer, loss);
    EXPECT_NEAR(rtnLoss(options.grid), c["rtn_loss"].get<double>(), 1e-9 * c["rtn_loss"].get<double>());
    ++cases;
  }
  EXPECT_EQ(cases, 4);
}

TEST_F(GptqAwqTest, AwqMatchesTheReferenceAndBeatsRoundToNearest) {
  int cases = 0;
  for (const auto& c : doc_["cases"]) {
    if (c["method"] != "awq") continue;
    AwqOptions options;
    options.grid = {.group = c["group"], .sym = c["sym"]};
    options.clip = c["clip"];
    options.grid_points = doc_["grid_points"];
    options.max_shrink = doc_["max_shrink"];
    const AwqScales found = awqSearchScales(w64_.data(), rows_, cols_, h_.data(), x_mean_.data(), options);
    EXPECT_EQ(found.alpha, c["alpha"].get<double>());
    EXPECT_LT(found.loss, found.rtn_loss);
    const auto s = c["s"].get<std::vector<double>>();
    ASSERT_EQ(found.scales.size(), s.size());
    for (size_t i = 0; i < s.size(); ++i) EXPECT_NEAR(found.scales[i], s[i], 1e-12 * s[i]) << i;

    std::vector<double> scaled(w64_);
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t k = 0; k < cols_; ++k) scaled[size_t(r * cols_ + k)] *= found.scales[size_t(k)];
    if (options.clip) {
      const std::vector<double> hs = scaledHessian(h_.data(), cols_, found.scales);
      awqClip(scaled.data(), rows_, cols_, hs.data(), options);
    }
    const formats::Int4Linear layer = int4Rtn(scaled.data(), rows_, cols_, options.grid);
    const double loss =
        outputError(w64_.data(), values(layer, found.scales).data(), rows_, cols_, h_.data());
    expectLayer(c, layer, loss);
    ++cases;
  }
  EXPECT_EQ(cases, 2);
}

TEST_F(GptqAwqTest, GptqOnIdentityHessianWithoutDampeningIsRoundToNearest) {
  // With H = I no column's error reaches another: GPTQ is plain rounding.
  std::vector<double> identity(size_t(cols_ * cols_), 0.0);
  for (int64_t i = 0; i < cols_; ++i) identity[size_t(i * cols_ + i)] = 1.0;
  GptqOptions options;
  options.grid = {.group = 32, .sym = false};
  options.damp = 0.0;
  auto layer = gptqQuantize(w_.data(), rows_, cols_, identity.data(), options);
  ASSERT_TRUE(layer.ok()) << layer.error().message;
  EXPECT_EQ(layer->codes, int4Rtn(w64_.data(), rows_, cols_, options.grid).codes);
}

TEST_F(GptqAwqTest, DeadColumnsAreZeroAndAnIndefiniteHessianIsAnError) {
  std::vector<double> h(h_);
  for (int64_t i = 0; i < cols_; ++i) h[size_t(i * cols_ + 5)] = h[size_t(5 * cols_ + i)] = 0.0;
  GptqOptions options;
  options.grid = {.group = 32, .sym = true};
  auto layer = gptqQuantize(w_.data(), rows_, cols_, h.data(), options);
  ASSERT_TRUE(layer.ok()) << layer.error().message;
  for (int64_t r = 0; r < rows_; ++r) EXPECT_EQ(layer->value(r, 5), 0.0f) << r;

  std::vector<double> negative(size_t(cols_ * cols_), 0.0);
  for (int64_t i = 0; i < cols_; ++i) negative[size_t(i * cols_ + i)] = i == 7 ? -1.0 : 1.0;
  options.damp = 0.0;
  auto bad = gptqQuantize(w_.data(), rows_, cols_, negative.data(), options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("not positive definite"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace kiln::quantize
