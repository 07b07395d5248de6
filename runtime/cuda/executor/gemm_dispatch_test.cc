// The row-count rules that pick a gemm step's kernel (gemm_dispatch.h), on
// bound steps with stand-in function handles: no GPU needed.
#include "runtime/cuda/executor/gemm_dispatch.h"

#include <gtest/gtest.h>

namespace kiln::cuda {
namespace {

CUfunction fakeFunction(uintptr_t id) { return reinterpret_cast<CUfunction>(id); }

BoundStep skinnyGemm() {
  BoundStep s;
  s.kind = StepKind::kGemm;
  s.gemv.fn = fakeFunction(1);
  s.gemv_single.fn = fakeFunction(2);
  return s;
}

TEST(GemmDispatch, SkinnyUpToEightRowsTheSingleRowInstanceForOne) {
  const BoundStep s = skinnyGemm();
  EXPECT_EQ(skinnyKernel(s, 1).fn, s.gemv_single.fn);
  EXPECT_EQ(skinnyKernel(s, 2).fn, s.gemv.fn);
  EXPECT_FALSE(onCublas(s, kGemvMaxRows));
  EXPECT_TRUE(onCublas(s, kGemvMaxRows + 1));
}

TEST(GemmDispatch, FusedVariantWinsAndF32GemmsRunOnCublas) {
  BoundStep s = skinnyGemm();
  s.fused.fn = fakeFunction(3);
  s.fused_single.fn = fakeFunction(4);
  EXPECT_EQ(skinnyKernel(s, 1).fn, s.fused_single.fn);
  EXPECT_EQ(skinnyKernel(s, 5).fn, s.fused.fn);
  BoundStep f32;  // an f32 plan's gemm: no instance at all
  EXPECT_TRUE(onCublas(f32, 1));
}

TEST(GemmDispatch, ResidualEpilogueOnlyAtDecodeSizesOnCublas) {
  BoundStep gemm = skinnyGemm();
  gemm.sum_norm = 1;
  BoundStep norm;
  norm.kind = StepKind::kResidualRmsNorm;
  norm.sum_from_gemm = true;
  const std::vector<BoundStep> steps{gemm, norm};
  EXPECT_FALSE(addsResidual(gemm, kGemvMaxRows));  // the skinny kernel's batch
  EXPECT_TRUE(addsResidual(gemm, kGemvMaxRows + 1));
  EXPECT_TRUE(addsResidual(gemm, kAutotuneMaxRows));
  EXPECT_FALSE(addsResidual(gemm, kAutotuneMaxRows + 1));
  EXPECT_TRUE(sumFromGemmBefore(steps, 1, kAutotuneMaxRows));
  EXPECT_FALSE(sumFromGemmBefore(steps, 1, 1));
}

TEST(GemmDispatch, AbsorbedStepRunsOnlyWhereTheGemmBeforeDidIt) {
  BoundStep gemm = skinnyGemm();
  gemm.fused.fn = fakeFunction(3);
  BoundStep silu_mul;
  silu_mul.kind = StepKind::kSiluMul;
  silu_mul.absorbed = true;
  std::vector<BoundStep> steps{gemm, silu_mul};
  EXPECT_TRUE(doneByGemmBefore(steps, 1, kGemvMaxRows));
  EXPECT_FALSE(doneByGemmBefore(steps, 1, kFusedSwiGluMinRows));  // no gemm_swiglu: cuBLASLt, then silu_mul
  steps[0].swiglu_fn = fakeFunction(5);
  EXPECT_FALSE(fusedSwiGlu(steps[0], kFusedSwiGluMinRows - 1));
  EXPECT_TRUE(doneByGemmBefore(steps, 1, kFusedSwiGluMinRows));
}

}  // namespace
}  // namespace kiln::cuda
