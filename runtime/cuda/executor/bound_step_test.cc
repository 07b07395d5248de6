// What step binding reads from a step without a GPU (bound_step.h): the
// form each kind's weights take on the device, and why a plan's 2:4 sparse
// weights run dense.
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

// A 2:4 sparse gemm (int4sp24: weight, scales, bias), with the plan's
// sparse variants or without (run dense).
Step sparseGemm(bool sparse_variants) {
  Step s = stepOf(StepKind::kGemm, GemmParams{.n = 64, .k = 64, .weight_type = "int4sp24", .bias = true,
                                              .scales = true, .group = 64});
  s.args.resize(4);
  if (sparse_variants) {
    s.variants.push_back({VariantRole::kSparseGemv, {1, 8}, {}, "sparse24_gemv", nullptr, "gemv"});
    s.variants.push_back({VariantRole::kSparseGemm, {9, RowRange::kUnbounded}, {}, "sparse24_gemm", nullptr, "mma"});
  } else {
    s.variants.push_back({VariantRole::kCublasLt, {1, RowRange::kUnbounded}});
  }
  return s;
}

TEST(StepWeightForm, SparseWeightsTakeTheGemvImageOrRunDense) {
  const Step sparse = sparseGemm(true);
  EXPECT_TRUE(runsSparse24Kernels(sparse));
  EXPECT_EQ(*stepWeightForm(sparse, 1, WeightForm::kBf16), WeightForm::kSparse24);
  EXPECT_EQ(*stepWeightForm(sparse, 2, WeightForm::kBf16), WeightForm::kF32) << "the scales, unread";
  EXPECT_EQ(*stepWeightForm(sparse, 3, WeightForm::kBf16), WeightForm::kBf16) << "the bias";
  const Step dense = sparseGemm(false);
  EXPECT_FALSE(runsSparse24Kernels(dense));
  EXPECT_EQ(*stepWeightForm(dense, 1, WeightForm::kF32), WeightForm::kF32) << "expanded to a dense matrix";
  EXPECT_EQ(*stepWeightForm(dense, 1, WeightForm::kBf16), WeightForm::kBf16);
}

TEST(Sparse24DenseNotice, SaysWhySparseWeightsRunDense) {
  Manifest manifest;
  manifest.target = "sm_90a";
  manifest.activation_type = "f32";
  Entry entry;
  entry.steps.push_back(sparseGemm(false));
  EXPECT_EQ(sparse24DenseNotice(manifest, entry),
            "2:4 sparse weights run dense: f32 activations (the sparse kernels read bf16)");
  manifest.activation_type = "bf16";
  manifest.target = "sm_75";
  EXPECT_EQ(sparse24DenseNotice(manifest, entry),
            "2:4 sparse weights run dense: sm_75 has no sparse tensor cores (sm_80 and later)");
  entry.steps[0] = sparseGemm(true);
  EXPECT_EQ(sparse24DenseNotice(manifest, entry), "") << "the sparse kernels run it";
  entry.steps[0] = stepOf(StepKind::kGemm, GemmParams{.n = 64, .k = 64, .weight_type = "bf16"});
  EXPECT_EQ(sparse24DenseNotice(manifest, entry), "") << "no sparse weights";
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
