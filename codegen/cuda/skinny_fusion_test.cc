// skinnyFusions on a real plan (the tiny-llama fixture: 2 pre-norm layers)
// and on plans where a value the fusion would drop is needed elsewhere.
#include "codegen/cuda/skinny_fusion.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace kiln::cuda_codegen {
namespace {

nlohmann::json fixtureForward() {
  std::ifstream in(std::string(KILN_TINY_LLAMA_DIR) + "/artifact/manifest.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str())["entries"]["forward"];
}

TEST(SkinnyFusion, FoldsNormsAndSiluMulOfEveryPreNormLayer) {
  std::vector<PlanStep> steps;
  std::set<int64_t> pinned;
  planStepsFromJson(fixtureForward(), steps, pinned);
  ASSERT_EQ(steps.size(), 23u);
  EXPECT_TRUE(pinned.count(27)) << "the logits are an entry output";
  const auto f = skinnyFusions(steps, pinned);
  ASSERT_EQ(f.size(), steps.size());
  const nlohmann::json residual{{"residual_type", "bf16"}, {"sum_type", "bf16"}};
  const nlohmann::json norm{{"norm_in_type", "bf16"}, {"norm_weight_type", "f32"}, {"norm_epsilon", 1e-5}};
  nlohmann::json norm_silu = norm;
  norm_silu["silu_mul"] = true;
  // Layer 0: qkv follows a plain rms_norm (not fused); o_proj adds the
  // residual; gate/up normalizes and applies SwiGLU; down adds the residual
  // into the norm before layer 1's qkv, which normalizes.
  EXPECT_TRUE(f[2].gemm_params.is_null());
  EXPECT_EQ(f[5].gemm_params, residual);
  EXPECT_TRUE(f[6].absorbed);
  EXPECT_EQ(f[7].gemm_params, norm_silu);
  EXPECT_TRUE(f[8].absorbed);
  EXPECT_EQ(f[9].gemm_params, residual);
  EXPECT_TRUE(f[10].absorbed);
  EXPECT_EQ(f[11].gemm_params, norm);
  // Layer 1's down feeds an add (the last layer): no residual epilogue.
  EXPECT_EQ(f[14].gemm_params, residual);
  EXPECT_EQ(f[16].gemm_params, norm_silu);
  EXPECT_TRUE(f[17].absorbed);
  EXPECT_TRUE(f[18].gemm_params.is_null());
  EXPECT_TRUE(f[22].gemm_params.is_null());
  for (size_t i : {0, 1, 3, 4, 12, 13, 19, 20, 21}) EXPECT_FALSE(f[i].absorbed) << i;
}

TEST(SkinnyFusion, KeepsValuesSomethingElseNeeds) {
  // gemm(y=1) -> silu_mul; gemm(y=3) -> residual_rms_norm(stream 0, 3) -> (4, 5) -> gemm(5).
  auto plan = [] {
    std::vector<PlanStep> s;
    s.push_back({"gemm", nlohmann::json::object(), {0, -1}, {1}});
    s.push_back({"silu_mul", {{"merged_gate_up", true}}, {1}, {2}});
    s.push_back({"gemm", nlohmann::json::object(), {2, -1}, {3}});
    s.push_back({"residual_rms_norm", {{"writes_sum", true}, {"x_type", "f32"}, {"sum_type", "f32"}}, {0, 3, -1}, {4, 5}});
    s.push_back({"gemm", nlohmann::json::object(), {5, -1}, {6}});
    return s;
  };
  auto all = skinnyFusions(plan(), {});
  EXPECT_EQ(all[0].gemm_params, nlohmann::json({{"silu_mul", true}}));
  EXPECT_EQ(all[2].gemm_params, nlohmann::json({{"residual_type", "f32"}, {"sum_type", "f32"}}));
  EXPECT_TRUE(all[1].absorbed && all[3].absorbed);
  // y read by a later step too: kept, no fusion.
  auto read_twice = plan();
  read_twice.push_back({"add", nlohmann::json::object(), {1, 3}, {7}});
  auto f = skinnyFusions(read_twice, {});
  EXPECT_TRUE(f[0].gemm_params.is_null());
  EXPECT_FALSE(f[1].absorbed);
  EXPECT_TRUE(f[2].gemm_params.is_null());
  EXPECT_FALSE(f[3].absorbed);
  // The normalized rows pinned (an output): the norm stays.
  f = skinnyFusions(plan(), {5});
  EXPECT_TRUE(f[2].gemm_params.is_null() && f[4].gemm_params.is_null());
  EXPECT_FALSE(f[3].absorbed);
  // A norm that does not write its sum, or an unmerged silu_mul: not fused.
  auto no_sum = plan();
  no_sum[3].params["writes_sum"] = false;
  no_sum[1].params["merged_gate_up"] = false;
  f = skinnyFusions(no_sum, {});
  for (const SkinnyFusion& s : f) EXPECT_TRUE(s.gemm_params.is_null() && !s.absorbed);
}

}  // namespace
}  // namespace kiln::cuda_codegen
