// kiln-compile --sparsity=2:4 --sparsity-method=sparsegpt on two tiny random
// Llamas, calibrated on test/fixtures/tiny-llama/calibration.json and
// compiled by ctest fixtures into $KILN_SPARSEGPT_DIR/<model>/<variant>
// (dense, sparsegpt, and sparsegpt-int8 / -int4 quantized at load):
//   checkpoint  the f32 tiny Llama test/fixtures/tiny-llama (the pruned
//               model written as a checkpoint)
//   gguf        the K-quant GGUF of make_kquant_llama.py, its block-typed
//               linears dequantized to f32 before pruning; the dense model
//               is the same GGUF made float by scripts/dequantize_gguf.py
// The written model's decoder linears are float with at most two nonzeros
// in every group of four input columns, and on held-out tokens
// (held_out_logits.h) the pruned model's logits are closer to the dense
// model's than magnitude pruning's: the two largest |w| of each group kept,
// applied here to the dense artifact's weights. Quantized at load, the
// pruned model's kept values keep its logits near the float pruned model's.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "models/formats/model_source.h"
#include "models/quantize/float_tensors.h"
#include "models/quantize/plan_linears.h"
#include "models/quantize/sparsegpt.h"
#include "runtime/artifact/manifest.h"
#include "runtime/weights/weight_store.h"
#include "test/e2e/held_out_logits.h"

namespace kiln {
namespace {

using formats::WeightRole;

std::string artifactDir(const std::string& name) {
  const char* root = std::getenv("KILN_SPARSEGPT_DIR");
  return std::string(root ? root : "$KILN_SPARSEGPT_DIR") + "/" + name;
}

class SparseGpt : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto dense = Manifest::load(artifactDir(GetParam() + "/dense"));
    ASSERT_TRUE(dense.ok()) << dense.error().message;
    dense_.emplace(dense.take());
    auto sparse = Manifest::load(artifactDir(GetParam() + "/sparsegpt"));
    ASSERT_TRUE(sparse.ok()) << sparse.error().message;
    sparse_.emplace(sparse.take());
  }

  std::optional<Manifest> dense_, sparse_;
};

TEST_P(SparseGpt, WritesFloatLinearsWithTwoNonzerosInEveryGroupOfFour) {
  auto model = formats::ModelSource::open(sparse_->model.source, formats::OpenMode::kWithData);
  ASSERT_TRUE(model.ok()) << model.error().message;
  int linears = 0;
  for (int layer = 0; layer < int(model->config().num_layers); ++layer)
    for (WeightRole role : quantize::kDecoderLinearRoles) {
      const formats::TensorInfo* t = model->weight(role, layer);
      ASSERT_NE(t, nullptr) << formats::weightRoleName(role) << " " << layer;
      EXPECT_TRUE(quantize::isFloatType(t->type)) << t->name;
      auto w = quantize::readTensorF32(*model, t->name);
      ASSERT_TRUE(w.ok()) << w.error().message;
      int dense_groups = 0;
      for (size_t i = 0; i < w->size(); i += 4) {
        int nonzero = 0;
        for (size_t c = i; c < i + 4; ++c) nonzero += (*w)[c] != 0.0f;
        dense_groups += nonzero > 2;
      }
      EXPECT_EQ(dense_groups, 0) << t->name;
      ++linears;
    }
  EXPECT_EQ(linears, 7 * int(model->config().num_layers));
}

TEST_P(SparseGpt, BeatsMagnitudePruning) {
  auto dense_weights = WeightStore::open(*dense_);
  ASSERT_TRUE(dense_weights.ok()) << dense_weights.error().message;
  const std::vector<float> dense = e2e::heldOutLogits(*dense_, *dense_weights);

  auto sparse_weights = WeightStore::open(*sparse_);
  ASSERT_TRUE(sparse_weights.ok()) << sparse_weights.error().message;
  const double sparsegpt = e2e::relativeError(e2e::heldOutLogits(*sparse_, *sparse_weights), dense);

  // Magnitude pruning of the dense artifact's decoder linears, in place.
  auto linears = quantize::findPlanLinears(*dense_, dense_weights->source());
  ASSERT_TRUE(linears.ok()) << linears.error().message;
  ASSERT_FALSE(linears->empty());
  for (const quantize::PlanLinear& l : *linears) {
    const BoundWeight& bound = *dense_weights->find(l.weight);
    auto w = quantize::boundWeightF32(bound);
    ASSERT_TRUE(w.ok()) << w.error().message;
    std::vector<double> pruned(w->begin(), w->end());
    quantize::magnitudePrune24(pruned.data(), l.rows, l.cols, pruned.data());
    auto bytes = dense_weights->writableData(l.weight);
    ASSERT_TRUE(bytes.ok()) << bytes.error().message;
    ASSERT_TRUE(quantize::storeWeightF32(*bytes, bound.format_type,
                                         std::vector<float>(pruned.begin(), pruned.end()))
                    .ok());
  }
  const double magnitude = e2e::relativeError(e2e::heldOutLogits(*dense_, *dense_weights), dense);
  std::printf("%-12s relative logits error: sparsegpt %.3g, magnitude %.3g\n", GetParam().c_str(),
              sparsegpt, magnitude);
  EXPECT_GT(sparsegpt, 0.0) << "nothing was pruned";
  EXPECT_LT(sparsegpt, magnitude);
}

TEST_P(SparseGpt, QuantizedAtLoadStaysNearThePrunedModel) {
  auto sparse_weights = WeightStore::open(*sparse_);
  ASSERT_TRUE(sparse_weights.ok()) << sparse_weights.error().message;
  const std::vector<float> pruned = e2e::heldOutLogits(*sparse_, *sparse_weights);
  for (const auto& [variant, bound] : {std::pair{"sparsegpt-int8", 1e-3}, {"sparsegpt-int4", 0.05}}) {
    auto manifest = Manifest::load(artifactDir(GetParam() + "/" + variant));
    ASSERT_TRUE(manifest.ok()) << manifest.error().message;
    auto weights = WeightStore::open(*manifest);
    ASSERT_TRUE(weights.ok()) << weights.error().message;
    const double error = e2e::relativeError(e2e::heldOutLogits(*manifest, *weights), pruned);
    std::printf("%-12s %s: relative logits error %.3g against the f32 pruned model\n",
                GetParam().c_str(), variant, error);
    EXPECT_GT(error, 0.0) << variant << ": nothing was quantized";
    EXPECT_LT(error, bound) << variant;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SparseGpt, ::testing::Values("checkpoint", "gguf"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace kiln
