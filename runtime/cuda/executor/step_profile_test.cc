#include "runtime/cuda/executor/step_profile.h"

#include <gtest/gtest.h>

namespace kiln::cuda {
namespace {

TEST(StepProfile, SumsInstancesOverLayersPerPhaseSlowestFirst) {
  StepProfile p;
  EXPECT_TRUE(p.empty());
  EXPECT_FALSE(p.beginForward("decode"));  // the first pass of a phase is not counted
  p.addStep("decode", "rms_norm_h8", 100.0);
  EXPECT_TRUE(p.empty());
  for (int pass = 0; pass < 2; ++pass) {
    EXPECT_TRUE(p.beginForward("decode"));
    for (int layer = 0; layer < 3; ++layer) {
      p.addStep("decode", "rms_norm_h8", 0.001);
      p.addStep("decode", "gemm_n16_k8", 0.010);
    }
  }
  p.beginForward("prefill");
  p.addStep("prefill", "gemm_n16_k8", 900.0);  // the first prefill pass: not counted
  p.beginForward("prefill");
  p.addStep("prefill", "gemm_n16_k8", 0.5);
  const std::string r = p.report();
  // decode: 2 passes, per pass 3 launches of each; 0.030 + 0.003 ms per pass.
  EXPECT_NE(r.find("decode: 2 forward passes after the first, 0.033 ms of kernels per pass"), std::string::npos) << r;
  EXPECT_NE(r.find("prefill: 1 forward passes after the first, 0.500 ms"), std::string::npos) << r;
  const size_t gemm = r.find("gemm_n16_k8"), norm = r.find("rms_norm_h8");
  ASSERT_NE(gemm, std::string::npos);
  ASSERT_NE(norm, std::string::npos);
  EXPECT_LT(gemm, norm) << "slowest first\n" << r;
  // gemm in decode: 3 launches per pass, 0.030 ms per pass, 90.9%, 10.0 us each.
  EXPECT_NE(r.find("3      0.030   90.9%      10.0"), std::string::npos) << r;
}

}  // namespace
}  // namespace kiln::cuda
