// What step binding reads from a step without a GPU (bound_step.h): the
// form each kind's weights take on the device.
#include "runtime/cuda/executor/bound_step.h"

#include <gtest/gtest.h>

namespace kiln::cuda {
namespace {

Step stepOf(StepKind kind, StepParams params) {
  Step s;
  s.kind = kind;
  s.path = "manifest.json: entries.forward.steps[0]";
  s.params = std::move(params);
  s.args.resize(3);
  return s;
}

TEST(StepWeightForm, GemmsTakeThePlansFormNormsTheirWeightTypeTablesTheirOwn) {
  EXPECT_EQ(*stepWeightForm(stepOf(StepKind::kGemm, GemmParams{}), 1, WeightForm::kBf16), WeightForm::kBf16);
  EXPECT_EQ(*stepWeightForm(stepOf(StepKind::kGemm, GemmParams{}), 1, WeightForm::kF32), WeightForm::kF32);
  EXPECT_EQ(*stepWeightForm(stepOf(StepKind::kRmsNorm, RmsNormParams{}), 1, WeightForm::kBf16), WeightForm::kF32);
  EXPECT_EQ(*stepWeightForm(stepOf(StepKind::kResidualRmsNorm, ResidualRmsNormParams{.weight_type = "bf16"}), 2,
                            WeightForm::kF32),
            WeightForm::kBf16);
  EXPECT_EQ(*stepWeightForm(stepOf(StepKind::kEmbedding, EmbeddingParams{.table_type = "q8_0"}), 1,
                            WeightForm::kBf16),
            WeightForm::kRaw);
}

TEST(StepWeightForm, SaysWhatHasNoKernel) {
  // (A norm weight in a block type never gets here: the plan takes f32, bf16 or f16.)
  auto table = stepWeightForm(stepOf(StepKind::kEmbedding, EmbeddingParams{.table_type = "q3_k"}), 1,
                              WeightForm::kBf16);
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.error().message.find("table_type: element type 'q3_k' has no CUDA kernel"), std::string::npos);
  // A K-quant table is expanded to bf16 rows at load (the embedding kernel reads those).
  auto kquant = stepWeightForm(stepOf(StepKind::kEmbedding, EmbeddingParams{.table_type = "q6_k"}), 1,
                               WeightForm::kBf16);
  ASSERT_TRUE(kquant.ok()) << kquant.error().message;
  EXPECT_EQ(*kquant, WeightForm::kBf16);
  auto silu = stepWeightForm(stepOf(StepKind::kSilu, ElementwiseParams{}), 1, WeightForm::kBf16);
  ASSERT_FALSE(silu.ok());
  EXPECT_NE(silu.error().message.find("args[1] is a weight, which this kind does not take"), std::string::npos);
}

}  // namespace
}  // namespace kiln::cuda
