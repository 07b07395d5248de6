// skinnyFusions on a real plan (the tiny-llama fixture: 2 pre-norm layers)
// and on plans where a value the fusion would drop is needed elsewhere or
// the shapes do not fit it.
#include "codegen/cuda/skinny_fusion.h"
#include "runtime/artifact/step_params_json.h"
#include "test/source_root.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace kiln::cuda_codegen {
namespace {

// The fixture's forward entry as the executor reads it (its own type is f32;
// the fusions are for bf16 plans).
PlanEntry fixtureForward(const std::string& activation_type = "bf16") {
  auto manifest = Manifest::load(checkoutPath("test/fixtures/tiny-llama/artifact"));
  EXPECT_TRUE(manifest.ok()) << manifest.error().message;
  return planEntryOf(*manifest->findEntry("forward"), activation_type);
}

GemmParams gemm(int64_t n, int64_t k = 64) { return {.n = n, .k = k, .weight_type = "bf16"}; }

TEST(SkinnyFusion, FoldsSiluMulAndRopeOfEveryLayer) {
  const PlanEntry plan = fixtureForward();
  ASSERT_EQ(plan.steps.size(), 23u);
  EXPECT_TRUE(plan.pinned.count(27)) << "the logits are an entry output";
  EXPECT_TRUE(plan.pinned.count(4)) << "attention's output is the storage of the o_proj input view";
  EXPECT_EQ(plan.storage.at(5), plan.storage.at(4)) << "a view has its storage's rows";
  const auto f = skinnyFusions(plan);
  ASSERT_EQ(f.size(), plan.steps.size());
  // Each layer's gate/up gemm (7, 16) takes SwiGLU from the silu_mul after
  // it, and its qkv gemm (2, 11) the rope_kv_append after it, with that
  // step's params (4 + 2 x 2 heads of 16: n 128).
  for (size_t i = 0; i < f.size(); ++i) {
    const bool gate_up = i == 7 || i == 16, qkv = i == 2 || i == 11;
    nlohmann::json want;
    if (gate_up) want = {{"silu_mul", true}};
    if (qkv) {
      want = toJson(plan.steps[i + 1].params);
      want["rope_kv_append"] = true;
      EXPECT_EQ(want.value("heads", 0), 4);
    }
    EXPECT_EQ(f[i].gemm_params, want) << i;
    EXPECT_EQ(f[i].absorbed, i == 8 || i == 17 || i == 3 || i == 12) << i;
    EXPECT_EQ(f[i].own_storage, i == 3 || i == 12) << i;
  }
  EXPECT_EQ(plan.storage.at(3), plan.storage.at(1)) << "the planner puts q over the qkv gemm's input";
}

// The fused kernels read and write bf16: the same plan with f32
// activations (the fixture's own type) folds nothing.
TEST(SkinnyFusion, NoneInF32Plans) {
  PlanEntry plan = fixtureForward("f32");
  const auto f = skinnyFusions(plan);
  ASSERT_EQ(f.size(), plan.steps.size());
  for (size_t i = 0; i < f.size(); ++i) {
    EXPECT_TRUE(f[i].gemm_params.is_null()) << i;
    EXPECT_FALSE(f[i].absorbed) << i;
    EXPECT_FALSE(f[i].own_storage) << i;
  }
}

TEST(SkinnyFusion, RopeOnlyOverTheWholeMergedQkv) {
  // gemm(x=0, y=1, n 8·(2 + 2·1) = 32) -> rope_kv_append(1) -> q 2.
  const RopeKvAppendParams rope{.attn = {.heads = 2, .kv_heads = 1, .head_dim = 8, .page_size = 16, .kv_type = "bf16"},
                                 .merged_qkv = true};
  auto plan = [&] {
    PlanEntry e;
    e.steps.push_back({StepKind::kGemm, gemm(32), {0, -1}, {1}});
    e.steps.push_back({StepKind::kRopeKvAppend, rope, {1, -1, -1, -1, -1}, {2}});
    e.storage = {{0, {0, 64}}, {1, {64, 128}}, {2, {128, 160}}};
    return e;
  };
  auto f = skinnyFusions(plan());
  nlohmann::json want = toJson(rope);
  want["rope_kv_append"] = true;
  EXPECT_EQ(f[0].gemm_params, want);
  EXPECT_TRUE(f[1].absorbed);
  EXPECT_TRUE(f[1].own_storage) << "q is written by the gemm's blocks while others still read x";
  // The gemm is not the whole merged qkv (n of another layout): not fused.
  auto other_n = plan();
  std::get<GemmParams>(other_n.steps[0].params).n = 24;
  f = skinnyFusions(other_n);
  EXPECT_TRUE(f[0].gemm_params.is_null() && !f[1].absorbed);
  // Separate q, k, v inputs: not this fusion.
  auto unmerged = plan();
  std::get<RopeKvAppendParams>(unmerged.steps[1].params).merged_qkv = false;
  f = skinnyFusions(unmerged);
  EXPECT_TRUE(f[0].gemm_params.is_null() && !f[1].absorbed);
  // q pinned (an entry output) or a view: it cannot move, so not fused.
  auto pinned = plan();
  pinned.pinned = {2};
  f = skinnyFusions(pinned);
  EXPECT_TRUE(f[0].gemm_params.is_null() && !f[1].absorbed);
  auto view = plan();
  view.views = {2};
  f = skinnyFusions(view);
  EXPECT_TRUE(f[0].gemm_params.is_null() && !f[1].absorbed);
  // int8 or fp8 pools: each row's scale needs its whole head, so
  // rope_kv_append runs its own kernel.
  for (const char* kv_type : {"int8", "fp8e4m3"}) {
    auto scaled = plan();
    std::get<RopeKvAppendParams>(scaled.steps[1].params).attn.kv_type = kv_type;
    f = skinnyFusions(scaled);
    EXPECT_TRUE(f[0].gemm_params.is_null() && !f[1].absorbed) << kv_type;
  }
  // The qkv read by another step too: not fused.
  auto read_twice = plan();
  read_twice.steps.push_back({StepKind::kAdd, ElementwiseParams{.width = 8}, {1, 2}, {3}});
  f = skinnyFusions(read_twice);
  EXPECT_TRUE(f[0].gemm_params.is_null() && !f[1].absorbed);
}

TEST(SkinnyFusion, KeepsValuesSomethingElseNeeds) {
  // gemm(y=1) -> silu_mul(1) -> 2.
  auto plan = [] {
    PlanEntry e;
    e.steps.push_back({StepKind::kGemm, gemm(32), {0, -1}, {1}});
    e.steps.push_back({StepKind::kSiluMul, SiluMulParams{.ffn = 16, .merged_gate_up = true}, {1}, {2}});
    e.storage = {{0, {0, 64}}, {1, {64, 192}}, {2, {192, 256}}};
    return e;
  };
  auto f = skinnyFusions(plan());
  EXPECT_EQ(f[0].gemm_params, nlohmann::json({{"silu_mul", true}}));
  EXPECT_TRUE(f[1].absorbed);
  // y read by a later step too: kept, no fusion.
  auto read_twice = plan();
  read_twice.steps.push_back({StepKind::kAdd, ElementwiseParams{.width = 16}, {1, 2}, {3}});
  f = skinnyFusions(read_twice);
  EXPECT_TRUE(f[0].gemm_params.is_null());
  EXPECT_FALSE(f[1].absorbed);
  // y pinned (an output or a view's storage): kept.
  auto pinned = plan();
  pinned.pinned = {1};
  f = skinnyFusions(pinned);
  EXPECT_TRUE(f[0].gemm_params.is_null() && !f[1].absorbed);
  // The silu_mul result planned over the gemm's input rows (dead by then in
  // the plan, still read by the fused kernel): not fused.
  auto reused = plan();
  reused.storage[2] = {32, 96};
  f = skinnyFusions(reused);
  EXPECT_TRUE(f[0].gemm_params.is_null() && !f[1].absorbed);
  // Separate gate and up inputs (unmerged): not this fusion.
  auto unmerged = plan();
  std::get<SiluMulParams>(unmerged.steps[1].params).merged_gate_up = false;
  f = skinnyFusions(unmerged);
  EXPECT_TRUE(f[0].gemm_params.is_null() && !f[1].absorbed);
}

// residual_rms_norm (x 1, residual 2) -> (sum 3, out 4), then gemm(4) -> 5:
// Llama-3-8B's qkv shape streams, so its single-row instance folds the norm.
PlanEntry normThenGemm(int64_t k) {
  PlanEntry plan;
  plan.steps.push_back({StepKind::kResidualRmsNorm,
                        ResidualRmsNormParams{
                            .hidden = k, .epsilon = 1e-5, .writes_sum = true, .x_type = "f32", .sum_type = "f32"},
                        {1, 2, -1},
                        {3, 4}});
  plan.steps.push_back({StepKind::kGemm, gemm(6144, k), {4, -1}, {5}});
  plan.steps.push_back({StepKind::kAdd, ElementwiseParams{.width = 6144}, {5, 3}, {6}});  // reads the gemm's output and the sum
  plan.storage = {{1, {0, 4 * k}}, {2, {4 * k, 6 * k}}, {3, {6 * k, 10 * k}}, {4, {10 * k, 12 * k}},
                  {5, {12 * k, 24 * k}}, {6, {0, 4 * k}}};
  return plan;
}

TEST(SkinnyFusion, FoldsResidualRmsNormIntoStreamedSingleRowGemm) {
  const auto f = skinnyFusions(normThenGemm(4096));
  EXPECT_TRUE(f[0].absorbed_single_row);
  EXPECT_FALSE(f[0].absorbed) << "batches of more rows run the norm";
  const nlohmann::json want = {{"norm_epsilon", 1e-5},       {"norm_x_type", "f32"},      {"norm_residual_type", "bf16"},
                               {"norm_sum_type", "f32"},      {"norm_weight_type", "f32"}, {"norm_writes_sum", true}};
  EXPECT_EQ(f[1].single_row_params, want);
  EXPECT_TRUE(f[1].gemm_params.is_null());
}

TEST(SkinnyFusion, NoNormFoldWhereItCannotStreamOrWouldClobberItsInputs) {
  // k 576 (SmolLM2): no streamed instance.
  EXPECT_FALSE(skinnyFusions(normThenGemm(576))[0].absorbed_single_row);
  // The gemm's output over the norm's stream input, which other blocks may
  // still be reading.
  PlanEntry over_x = normThenGemm(4096);
  over_x.storage[5] = {0, 4096 * 12};
  EXPECT_FALSE(skinnyFusions(over_x)[0].absorbed_single_row);
  // The sum over the branch input.
  PlanEntry over_residual = normThenGemm(4096);
  over_residual.storage[3] = {4096 * 5, 4096 * 9};
  EXPECT_FALSE(skinnyFusions(over_residual)[0].absorbed_single_row);
  // The norm's output read by another step too.
  PlanEntry shared = normThenGemm(4096);
  shared.steps[2].value_args = {5, 4};
  EXPECT_FALSE(skinnyFusions(shared)[0].absorbed_single_row);
  // Nothing in f32 plans.
  PlanEntry f32 = normThenGemm(4096);
  f32.activation_type = "f32";
  EXPECT_FALSE(skinnyFusions(f32)[0].absorbed_single_row);
}


// Two pre-norm residual adds after cuBLASLt GEMMs, as a Llama layer has:
//   0 gemm(5) -> 6              o_proj; 5 is a view of 4
//   1 residual_rms_norm(0, 6) -> (7, 8)    the planner put 7 over 4's rows
//   2 gemm(8) -> 11             down
//   3 residual_rms_norm(7, 11) -> (12, 13) 12 apart from everything
//   4 gemm(13) -> 14            the next o_proj
//   5 residual_rms_norm(12, 14) -> (15, 16) 15 over 13's rows
//   6 add(15, 16) -> 17
PlanEntry residualLayer() {
  const ResidualRmsNormParams norm{
      .hidden = 64, .epsilon = 1e-5, .writes_sum = true, .x_type = "f32", .sum_type = "f32"};
  PlanEntry plan;
  plan.steps.push_back({StepKind::kGemm, gemm(64), {5, -1}, {6}});
  plan.steps.push_back({StepKind::kResidualRmsNorm, norm, {0, 6, -1}, {7, 8}});
  plan.steps.push_back({StepKind::kGemm, gemm(64), {8, -1}, {11}});
  plan.steps.push_back({StepKind::kResidualRmsNorm, norm, {7, 11, -1}, {12, 13}});
  plan.steps.push_back({StepKind::kGemm, gemm(64), {13, -1}, {14}});
  plan.steps.push_back({StepKind::kResidualRmsNorm, norm, {12, 14, -1}, {15, 16}});
  plan.steps.push_back({StepKind::kAdd, ElementwiseParams{.width = 64}, {15, 16}, {17}});
  plan.views = {5};
  plan.pinned = {4, 17};
  plan.storage = {{0, {0, 256}},     {4, {256, 384}},   {5, {256, 384}},   {6, {384, 512}},  {7, {256, 512}},
                  {8, {512, 640}},   {11, {640, 768}},  {12, {768, 1024}}, {13, {1024, 1152}},
                  {14, {1152, 1280}}, {15, {1024, 1280}}, {16, {0, 128}},   {17, {128, 384}}};
  return plan;
}

TEST(SkinnyFusion, ResidualAddsMoveIntoTheGemmEpilogue) {
  const auto f = skinnyFusions(residualLayer());
  for (size_t g : {0u, 2u, 4u}) {
    EXPECT_TRUE(f[g].writes_norm_sum) << g;
    EXPECT_TRUE(f[g + 1].sum_from_gemm) << g + 1;
    EXPECT_FALSE(f[g + 1].absorbed) << "the norm still runs, over the sum";
    const nlohmann::json want{{"epsilon", 1e-5}, {"hidden", 64}, {"x_type", "f32"}};
    EXPECT_EQ(f[g + 1].norm_of_sum_params, want) << g + 1;
  }
  // 7 lies over the o_proj's input and 15 over the next one's: storage of
  // their own, one buffer (7's last reader, step 3, comes before step 4
  // writes 15). 12 is written where it was planned.
  EXPECT_TRUE(f[1].sum_own_storage);
  EXPECT_FALSE(f[3].sum_own_storage);
  EXPECT_TRUE(f[5].sum_own_storage);
}

TEST(SkinnyFusion, NoResidualEpilogueWhereTheSumCannotBeWrittenThere) {
  auto fused = [](const PlanEntry& plan, size_t gemm) {
    const auto f = skinnyFusions(plan);
    EXPECT_EQ(f[gemm].writes_norm_sum, f[gemm + 1].sum_from_gemm);
    return f[gemm].writes_norm_sum;
  };
  // 7 read again at step 6: still live when step 4 would write 15 into the
  // one buffer, so 15 stays in the arena, over its gemm's input: no fold.
  PlanEntry long_lived = residualLayer();
  long_lived.steps[6].value_args = {15, 7};
  EXPECT_TRUE(fused(long_lived, 0));
  EXPECT_TRUE(fused(long_lived, 2));
  EXPECT_FALSE(fused(long_lived, 4));
  // A pinned sum cannot move out of the arena.
  PlanEntry pinned = residualLayer();
  pinned.pinned.insert(7);
  EXPECT_FALSE(fused(pinned, 0));
  EXPECT_TRUE(fused(pinned, 2));
  // The gemm's output read by another step; a bias; a bf16 stream; no sum written.
  PlanEntry read_twice = residualLayer();
  read_twice.steps[6].value_args = {15, 11};
  EXPECT_FALSE(fused(read_twice, 2));
  PlanEntry bias = residualLayer();
  std::get<GemmParams>(bias.steps[2].params).bias = true;
  EXPECT_FALSE(fused(bias, 2));
  PlanEntry bf16 = residualLayer();
  std::get<ResidualRmsNormParams>(bf16.steps[3].params).x_type = "bf16";
  EXPECT_FALSE(fused(bf16, 2));
  PlanEntry no_sum = residualLayer();
  std::get<ResidualRmsNormParams>(no_sum.steps[5].params).writes_sum = false;
  no_sum.steps[5].results = {16};
  EXPECT_FALSE(fused(no_sum, 4));
  // f32 plans: none (their GEMMs' output is the stream's type already).
  PlanEntry f32 = residualLayer();
  f32.activation_type = "f32";
  EXPECT_FALSE(fused(f32, 0));
}

}  // namespace
}  // namespace kiln::cuda_codegen
