// The row-count rules that pick a gemm step's kernel (gemm_dispatch.h) among
// the ranges its plan variants give, on bound steps with stand-in function
// handles: no GPU needed.
#include "runtime/cuda/executor/gemm_dispatch.h"

#include <gtest/gtest.h>

namespace kiln::cuda {
namespace {

CUfunction fakeFunction(uintptr_t id) { return reinterpret_cast<CUfunction>(id); }

// A gemm with the ranges kernel_selection gives a bf16 plan: one row, 2-8 rows.
BoundStep skinnyGemm() {
  BoundStep s;
  s.kind = StepKind::kGemm;
  s.single = {fakeFunction(2), "single", {1, 1}};
  s.skinny = {fakeFunction(1), "skinny", {2, 8}};
  return s;
}

TEST(GemmDispatch, SkinnyKernelsTakeTheirRangesCublasTheRest) {
  const BoundStep s = skinnyGemm();
  EXPECT_EQ(skinnyKernel(s, 1), &s.single);
  EXPECT_EQ(skinnyKernel(s, 2), &s.skinny);
  EXPECT_EQ(skinnyKernel(s, 8), &s.skinny);
  EXPECT_EQ(skinnyKernel(s, 9), nullptr);
  EXPECT_FALSE(onCublas(s, 8));
  EXPECT_TRUE(onCublas(s, 9));
}

TEST(GemmDispatch, RangesComeFromThePlanNotConstants) {
  BoundStep s = skinnyGemm();
  s.skinny.rows = {2, 4};
  EXPECT_EQ(skinnyKernel(s, 4), &s.skinny);
  EXPECT_TRUE(onCublas(s, 5));
  s.single.fn = nullptr;  // no single-row instance chosen: one row is cuBLASLt's
  EXPECT_TRUE(onCublas(s, 1));
  BoundStep f32;  // an f32 plan's gemm: cuBLASLt only
  f32.kind = StepKind::kGemm;
  EXPECT_TRUE(onCublas(f32, 1));
}

TEST(GemmDispatch, SparseGemmsRunTheGemvThenTheSparseGemmNeverCublas) {
  BoundStep s;
  s.kind = StepKind::kGemm;
  s.sparse_gemv = {fakeFunction(3), "sparse24_gemv", {1, 8}};
  s.sparse_gemm = {fakeFunction(4), "sparse24_gemm", {9, RowRange::kUnbounded}};
  EXPECT_EQ(sparse24Kernel(s, 1), &s.sparse_gemv);
  EXPECT_EQ(sparse24Kernel(s, 8), &s.sparse_gemv);
  EXPECT_EQ(sparse24Kernel(s, 9), &s.sparse_gemm);
  EXPECT_EQ(sparse24Kernel(s, 4096), &s.sparse_gemm);
  for (int64_t rows : {1, 8, 9, 4096}) {
    EXPECT_FALSE(onCublas(s, rows)) << rows;
    EXPECT_EQ(skinnyKernel(s, rows), nullptr) << rows;
    EXPECT_FALSE(expandsWeight(s, rows)) << rows;
  }
  EXPECT_EQ(sparse24Kernel(skinnyGemm(), 1), nullptr) << "a dense gemm";
}

TEST(GemmDispatch, ResidualEpilogueOnlyInItsRangeOnCublas) {
  BoundStep gemm = skinnyGemm();
  gemm.sum_norm = 1;
  gemm.residual_rows = RowRange{1, 512};
  BoundStep norm;
  norm.kind = StepKind::kResidualRmsNorm;
  norm.norm_of_sum_rows = RowRange{1, 512};
  const std::vector<BoundStep> steps{gemm, norm};
  EXPECT_FALSE(addsResidual(gemm, 8));  // the skinny kernel's batch
  EXPECT_TRUE(addsResidual(gemm, 9));
  EXPECT_TRUE(addsResidual(gemm, 512));
  EXPECT_FALSE(addsResidual(gemm, 513));
  EXPECT_TRUE(sumFromGemmBefore(steps, 1, 512));
  EXPECT_FALSE(sumFromGemmBefore(steps, 1, 1));
  EXPECT_FALSE(sumFromGemmBefore(steps, 1, 513));
}

TEST(GemmDispatch, AbsorbedStepSkipsOnlyItsRows) {
  BoundStep gemm = skinnyGemm();
  gemm.fused = true;
  BoundStep silu_mul;
  silu_mul.kind = StepKind::kSiluMul;
  silu_mul.absorbed_rows = RowRange{1, 8};
  std::vector<BoundStep> steps{gemm, silu_mul};
  EXPECT_TRUE(doneByGemmBefore(steps, 1, 8));
  EXPECT_FALSE(doneByGemmBefore(steps, 1, 9));
  EXPECT_FALSE(doneByGemmBefore(steps, 1, 1024));  // no gemm_swiglu: cuBLASLt, then silu_mul
  steps[0].swiglu_fn = fakeFunction(5);
  steps[0].swiglu_rows = {1024, RowRange::kUnbounded};
  steps[1].absorbed_prefill_rows = RowRange{1024, RowRange::kUnbounded};
  EXPECT_FALSE(fusedSwiGlu(steps[0], 1023));
  EXPECT_TRUE(fusedSwiGlu(steps[0], 1024));
  EXPECT_FALSE(onCublas(steps[0], 4096));
  EXPECT_TRUE(doneByGemmBefore(steps, 1, 4096));
}

TEST(GemmDispatch, FoldedNormSkipsOnlyItsRows) {
  BoundStep norm;
  norm.kind = StepKind::kResidualRmsNorm;
  EXPECT_FALSE(doneByGemmAfter(norm, 1));
  norm.folded_rows = RowRange{1, 1};
  EXPECT_TRUE(doneByGemmAfter(norm, 1));
  EXPECT_FALSE(doneByGemmAfter(norm, 2));
}

}  // namespace
}  // namespace kiln::cuda
