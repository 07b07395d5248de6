// What step binding reads from a step without a GPU (bound_step.h): the
// form each kind's weights take on the device.
#include "runtime/cuda/executor/bound_step.h"

#include <gtest/gtest.h>

namespace kiln::cuda {
namespace {

Step stepOf(StepKind kind, StepParams::Map params) {
  Step s;
  s.kind = kind;
  s.path = "manifest.json: entries.forward.steps[0]";
  s.params = StepParams(s.path + ".params", std::move(params));
  s.args.resize(3);
  return s;
}

TEST(StepWeightForm, GemmsTakeThePlansFormNormsTheirWeightTypeTablesTheirOwn) {
  EXPECT_EQ(*stepWeightForm(stepOf(StepKind::kGemm, {}), 1, WeightForm::kBf16), WeightForm::kBf16);
  EXPECT_EQ(*stepWeightForm(stepOf(StepKind::kGemm, {}), 1, WeightForm::kF32), WeightForm::kF32);
  EXPECT_EQ(*stepWeightForm(stepOf(StepKind::kRmsNorm, {}), 1, WeightForm::kBf16), WeightForm::kF32);
  EXPECT_EQ(*stepWeightForm(stepOf(StepKind::kResidualRmsNorm, {{"weight_type", std::string("bf16")}}), 2,
                            WeightForm::kF32),
            WeightForm::kBf16);
  EXPECT_EQ(*stepWeightForm(stepOf(StepKind::kEmbedding, {{"table_type", std::string("q8_0")}}), 1,
                            WeightForm::kBf16),
            WeightForm::kRaw);
}

TEST(StepWeightForm, SaysWhatHasNoKernel) {
  auto raw_norm = stepWeightForm(stepOf(StepKind::kRmsNorm, {{"weight_type", std::string("q4_0")}}), 1,
                                 WeightForm::kBf16);
  ASSERT_FALSE(raw_norm.ok());
  EXPECT_NE(raw_norm.error().message.find("norm weight_type q4_0 has no CUDA kernel"), std::string::npos);
  auto table = stepWeightForm(stepOf(StepKind::kEmbedding, {{"table_type", std::string("i2")}}), 1,
                              WeightForm::kBf16);
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.error().message.find("table_type: element type 'i2' has no CUDA kernel"), std::string::npos);
  auto silu = stepWeightForm(stepOf(StepKind::kSilu, {}), 1, WeightForm::kBf16);
  ASSERT_FALSE(silu.ok());
  EXPECT_NE(silu.error().message.find("args[1] is a weight, which this kind does not take"), std::string::npos);
}

}  // namespace
}  // namespace kiln::cuda
