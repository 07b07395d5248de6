// selectKernels on small plans: which variants each step gets, by target
// (sm_90a, sm_80) and activation type, with the row ranges and the features
// each alternative needs; every kernel variant generates.
#include "codegen/cuda/kernel_selection.h"

#include <gtest/gtest.h>

#include <tuple>

#include "codegen/cuda/activation_types.h"
#include "codegen/cuda/instance_source.h"
#include "runtime/artifact/step_params_json.h"

namespace kiln::cuda_codegen {
namespace {

using nlohmann::json;
using F = KernelFeature;
using R = VariantRole;

StepParams paramsOf(StepKind kind, const json& params) {
  auto values = paramsFromJson(params, "params");
  EXPECT_TRUE(values.ok()) << values.error().message;
  auto typed = parseStepParams(kind, *values, "params");
  EXPECT_TRUE(typed.ok()) << typed.error().message;
  return typed.ok() ? typed.take() : StepParams{};
}

PlanStep step(StepKind kind, const json& params, std::vector<int64_t> args, std::vector<int64_t> results,
              std::string instance = "own") {
  return {kind, paramsOf(kind, params), std::move(args), std::move(results), std::move(instance)};
}

std::vector<std::vector<KernelVariant>> select(const PlanEntry& entry, const std::string& arch,
                                               const std::string& activation_type = "bf16") {
  auto out = selectKernels(entry, {arch, activation_type});
  EXPECT_TRUE(out.ok()) << out.error().message;
  return out.ok() ? out.take() : std::vector<std::vector<KernelVariant>>(entry.steps.size());
}

// The variants of `role`, in the plan's order.
std::vector<const KernelVariant*> ofRole(const std::vector<KernelVariant>& variants, R role) {
  std::vector<const KernelVariant*> out;
  for (const KernelVariant& v : variants)
    if (v.role == role) out.push_back(&v);
  return out;
}

void expectRows(const KernelVariant& v, int64_t min, int64_t max) {
  EXPECT_EQ(v.rows.min, min) << variantRoleName(v.role);
  EXPECT_EQ(v.rows.max, max) << variantRoleName(v.role);
}

void expectAllGenerate(const std::vector<std::vector<KernelVariant>>& steps) {
  for (const auto& variants : steps)
    for (const KernelVariant& v : variants) {
      if (!roleHasKernel(v.role)) {
        EXPECT_TRUE(v.instance.empty());
        continue;
      }
      auto generated = instanceSource(v.kind, v.params, v.instance);
      EXPECT_TRUE(generated.ok()) << v.instance << ": " << generated.error().message;
    }
}

const json kAttention = {{"heads", 32}, {"kv_heads", 8}, {"head_dim", 128}, {"page_size", 16},
                         {"scale", 0.08838834764831845}, {"kv_type", "bf16"}, {"tree_mask", false}};

PlanEntry attentionOnly(const json& params) {
  PlanEntry plan;
  plan.steps.push_back(step(StepKind::kPagedAttention, params, {1, -1, -1, -1, -1, -1}, {2}, "attn_l0"));
  return plan;
}

TEST(KernelSelection, AttentionGetsDecodeCombineAndPrefillByTarget) {
  const auto hopper = select(attentionOnly(kAttention), "sm_90a")[0];
  ASSERT_EQ(hopper.size(), 4u);
  EXPECT_EQ(hopper[0].role, R::kStep);
  EXPECT_EQ(hopper[0].instance, "attn_l0") << "the plan's own name";
  EXPECT_EQ(hopper[1].kind, "decode_attention");
  EXPECT_EQ(hopper[2].kind, "attention_combine");
  EXPECT_EQ(hopper[2].params, (json{{"heads", 32}, {"head_dim", 128}}));
  EXPECT_EQ(hopper[3].role, R::kPrefill);
  EXPECT_EQ(hopper[3].kind, "flash_attention_wgmma");
  expectRows(hopper[3], kFlashMinQuery, RowRange::kUnbounded);
  EXPECT_EQ(hopper[3].needs, std::vector<F>{F::kFlashAttention});
  for (const KernelVariant& v : hopper) {  // each one generates; only the wgmma one needs sm_90a
    auto generated = instanceSource(v.kind, v.params, v.instance);
    ASSERT_TRUE(generated.ok()) << v.kind;
    EXPECT_EQ(generated->arch, v.kind == "flash_attention_wgmma" ? "sm_90a" : "") << v.kind;
  }
  const auto ampere = select(attentionOnly(kAttention), "sm_80")[0];
  ASSERT_EQ(ampere.size(), 4u);
  EXPECT_EQ(ampere[3].kind, "flash_attention");

  // No tensor-core prefill for f32 pools; tree masks keep the step's own kernel only.
  json f32_pool = kAttention;
  f32_pool["kv_type"] = "f32";
  EXPECT_EQ(select(attentionOnly(f32_pool), "sm_90a")[0].size(), 3u);
  // int8/fp8 pools: the CUDA-core decode kernel reads their codes and
  // scales; the tensor-core prefill stays bf16's.
  for (const char* kv_type : {"int8", "fp8e4m3"}) {
    json scaled = kAttention;
    scaled["kv_type"] = kv_type;
    const auto variants = select(attentionOnly(scaled), "sm_90a")[0];
    ASSERT_EQ(variants.size(), 3u) << kv_type;
    EXPECT_EQ(variants[1].kind, "decode_attention") << kv_type;
    EXPECT_EQ(variants[1].params.value("kv_type", ""), kv_type);
  }
  json tree = kAttention;
  tree["tree_mask"] = true;
  EXPECT_EQ(select(attentionOnly(tree), "sm_90a")[0].size(), 1u);
}

// Speculative verify's index steps run on the host (the CUDA executor
// stages the tree's positions and mask and walks the accepted path over
// the argmax): no variants, on either activation type.
TEST(KernelSelection, VerifyIndexStepsRunOnTheHost) {
  PlanEntry plan;
  plan.steps.push_back(step(StepKind::kTreePositions, json::object(), {-1, -1, -1}, {0}));
  plan.steps.push_back(step(StepKind::kTreeMask, json::object(), {-1, -1}, {1}));
  plan.steps.push_back(step(StepKind::kAccept, {{"mode", "greedy"}}, {2, -1, -1, -1}, {3, 4}));
  for (const char* activation : {"bf16", "f32"}) {
    const auto list = select(plan, "sm_90a", activation);
    ASSERT_EQ(list.size(), 3u);
    for (const auto& variants : list) EXPECT_TRUE(variants.empty()) << activation;
  }
  EXPECT_TRUE(runsOnHost(StepKind::kAccept));
  EXPECT_FALSE(runsOnHost(StepKind::kPagedAttention));
}

// moe_ffn: the gathered GEMVs for any batch; bf16 plans on sm_80 and later
// add the grouped tensor-core gate/up and down from two slots an expert on
// average (Mixtral: 8 rows; 128 experts, top 8: 32), where hidden and ffn
// are multiples of 64. f32 plans, older targets and other shapes keep the GEMVs.
TEST(KernelSelection, MoeGroupedGemmsFromTwoSlotsAnExpertInBf16) {
  auto moePlan = [](int64_t hidden, int64_t ffn, int64_t experts, int64_t top_k) {
    PlanEntry plan;
    plan.steps.push_back(step(StepKind::kMoeFfn,
                              {{"hidden", hidden}, {"ffn", ffn}, {"experts", experts}, {"top_k", top_k},
                               {"weight_type", "bf16"}},
                              {0, 1, 2, -1, -1, -1}, {3}, "moe_l0"));
    return plan;
  };
  for (auto [experts, top_k, min_rows] : {std::tuple{8, 2, 8}, std::tuple{128, 8, 32}, std::tuple{4, 2, 4}}) {
    const auto list = select(moePlan(4096, 14336, experts, top_k), "sm_90a");
    ASSERT_EQ(list.size(), 1u);
    const auto gate_up = ofRole(list[0], R::kMoeGroupedGateUp), down = ofRole(list[0], R::kMoeGroupedDown);
    ASSERT_EQ(gate_up.size(), 1u);
    ASSERT_EQ(down.size(), 1u);
    EXPECT_EQ(gate_up[0]->kind, "moe_gate_up_mma");
    EXPECT_EQ(down[0]->kind, "moe_down_mma");
    expectRows(*gate_up[0], min_rows, RowRange::kUnbounded);
    expectRows(*down[0], min_rows, RowRange::kUnbounded);
    for (R role : {R::kStep, R::kMoeDown, R::kCombine}) {
      ASSERT_EQ(ofRole(list[0], role).size(), 1u) << variantRoleName(role);
      expectRows(*ofRole(list[0], role)[0], 1, RowRange::kUnbounded);
    }
    expectAllGenerate(list);
  }
  auto noGrouped = [&](const PlanEntry& plan, const char* arch, const char* activation, const char* what) {
    const auto list = select(plan, arch, activation);
    ASSERT_EQ(list.size(), 1u);
    EXPECT_TRUE(ofRole(list[0], R::kMoeGroupedGateUp).empty()) << what;
    EXPECT_TRUE(ofRole(list[0], R::kMoeGroupedDown).empty()) << what;
    EXPECT_EQ(ofRole(list[0], R::kMoeDown).size(), 1u) << what;
    expectAllGenerate(list);
  };
  noGrouped(moePlan(4096, 14336, 8, 2), "sm_90a", "f32", "f32 plan");
  noGrouped(moePlan(4096, 14336, 8, 2), "sm_75", "bf16", "sm_75");
  noGrouped(moePlan(4096, 280, 8, 2), "sm_90a", "bf16", "ffn 280");
  noGrouped(moePlan(1064, 768, 8, 2), "sm_90a", "bf16", "hidden 1064");
  EXPECT_TRUE(ofRole(select(moePlan(4096, 14336, 8, 2), "sm_80")[0], R::kMoeGroupedGateUp).size() == 1u);
}

// A K-quant embedding table: the GPU's embedding kernel reads it as the
// bf16 rows the runtime expands it into; ggml's 32-element blocks it reads
// as they are.
TEST(KernelSelection, KQuantEmbeddingTablesReadAsBf16) {
  for (auto [table, read_as] : {std::pair{"q6_k", "bf16"}, std::pair{"q4_k", "bf16"}, std::pair{"q8_0", "q8_0"}}) {
    PlanEntry plan;
    plan.steps.push_back(step(StepKind::kEmbedding, {{"hidden", 256}, {"table_type", table}}, {-1, -1}, {1}));
    const auto list = select(plan, "sm_90a");
    ASSERT_EQ(list[0].size(), 1u) << table;
    EXPECT_EQ(list[0][0].params["table_type"], read_as) << table;
    EXPECT_EQ(embeddingTableExpands(table), std::string(read_as) == "bf16");
    expectAllGenerate(list);
  }
}

TEST(KernelSelection, TargetHelpers) {
  EXPECT_TRUE(warpgroupMmaTarget("sm_90"));
  EXPECT_TRUE(warpgroupMmaTarget("sm_90a"));
  EXPECT_FALSE(warpgroupMmaTarget("sm_80"));
  EXPECT_FALSE(warpgroupMmaTarget("sm_100"));
  EXPECT_TRUE(bulkCopyTarget("sm_90"));
  EXPECT_TRUE(bulkCopyTarget("sm_90a"));
  EXPECT_TRUE(bulkCopyTarget("sm_100"));
  EXPECT_FALSE(bulkCopyTarget("sm_89"));
  EXPECT_FALSE(bulkCopyTarget("compute_90"));
  const std::string long_name(300, 'x');
  EXPECT_LE(boundedInstanceName(long_name).size(), 160u);
  EXPECT_NE(boundedInstanceName(long_name), boundedInstanceName(std::string(299, 'x') + "y"));
  EXPECT_EQ(boundedInstanceName("short"), "short");
}

PlanEntry gemmOnly(int64_t n, int64_t k, const std::string& weight_type = "bf16") {
  PlanEntry plan;
  plan.steps.push_back(
      step(StepKind::kGemm, {{"n", n}, {"k", k}, {"weight_type", weight_type}, {"bias", false}}, {1, -1}, {2}, "g_own"));
  return plan;
}

TEST(KernelSelection, GemmSingleRowSkinnyAndCublasRanges) {
  // A small f32-weight gemm on Hopper: too small to stream.
  const auto list = select(gemmOnly(64, 64, "f32"), "sm_90a")[0];
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].role, R::kSingleRow);
  expectRows(list[0], 1, 1);
  EXPECT_EQ(list[0].params["gemv_max_rows"], 1);
  EXPECT_TRUE(list[0].needs.empty());
  EXPECT_EQ(list[1].role, R::kSkinny);
  expectRows(list[1], 2, kSkinnyMaxRows);
  EXPECT_EQ(list[1].instance, instanceName("gemm", list[1].params)) << "its weights differ from the plan's: own name";
  for (const KernelVariant* v : {&list[0], &list[1]}) EXPECT_EQ(v->params["weight_type"], "bf16");
  EXPECT_EQ(list[2].role, R::kCublasLt);
  expectRows(list[2], kSkinnyMaxRows + 1, RowRange::kUnbounded);
  EXPECT_TRUE(list[2].instance.empty());
  EXPECT_EQ(select(gemmOnly(64, 64), "sm_90a")[0][1].instance, "g_own") << "bf16 weights keep the plan's name";

  // Llama-3-8B's o_proj streams on sm_90+: the streamed single-row instance
  // first (it needs stream_gemv), the plain one after it.
  const auto streamed = select(gemmOnly(4096, 4096), "sm_90a")[0];
  const auto single = ofRole(streamed, R::kSingleRow);
  ASSERT_EQ(single.size(), 2u);
  EXPECT_EQ(single[0]->params.value("gemv_stream", false), true);
  EXPECT_EQ(single[0]->needs, std::vector<F>{F::kStreamGemv});
  EXPECT_FALSE(single[1]->params.contains("gemv_stream"));
  EXPECT_TRUE(single[1]->needs.empty());
  EXPECT_EQ(ofRole(select(gemmOnly(4096, 4096), "sm_80")[0], R::kSingleRow).size(), 1u) << "no bulk copies";
  EXPECT_FALSE(ofRole(select(gemmOnly(128256, 4096), "sm_90a")[0], R::kSingleRow)[0]->params.contains("gemv_stream"))
      << "the LM head (1 GB) does not stream";
  expectAllGenerate(select(gemmOnly(4096, 4096), "sm_90a"));
}

// gate/up gemm -> silu_mul, both merged, nothing else reading the gate/up output.
PlanEntry gateUp(int64_t ffn, int64_t hidden, bool bias = false) {
  PlanEntry plan;
  plan.steps.push_back(
      step(StepKind::kGemm, {{"n", 2 * ffn}, {"k", hidden}, {"weight_type", "bf16"}, {"bias", bias}},
           bias ? std::vector<int64_t>{1, -1, -1} : std::vector<int64_t>{1, -1}, {2}));
  plan.steps.push_back(step(StepKind::kSiluMul, {{"ffn", ffn}, {"merged_gate_up", true}}, {2}, {3}));
  return plan;
}

TEST(KernelSelection, SwiGluFoldsIntoTheGemmAndGemmSwiGluOnHopper) {
  const auto hopper = select(gateUp(14336, 4096), "sm_90a");
  const std::vector<KernelVariant>& gemm = hopper[0];
  ASSERT_EQ(ofRole(gemm, R::kFused).size(), 1u);
  const KernelVariant& fused = *ofRole(gemm, R::kFused)[0];
  EXPECT_EQ(fused.params["silu_mul"], true);
  expectRows(fused, 2, kSkinnyMaxRows);
  EXPECT_TRUE(ofRole(gemm, R::kSkinny).empty() && ofRole(gemm, R::kSingleRow).empty())
      << "skinny batches all run the fused variants";
  const auto fused_single = ofRole(gemm, R::kFusedSingleRow);
  ASSERT_EQ(fused_single.size(), 2u);  // streamed, plain
  EXPECT_EQ(fused_single[0]->params["silu_mul"], true);
  const auto swiglu = ofRole(gemm, R::kFusedPrefill);
  ASSERT_EQ(swiglu.size(), 1u);
  EXPECT_EQ(swiglu[0]->kind, "gemm_swiglu");
  EXPECT_EQ(swiglu[0]->params, (json{{"hidden", 4096}, {"ffn", 14336}}));
  expectRows(*swiglu[0], kFusedSwiGluMinRows, RowRange::kUnbounded);
  EXPECT_EQ(swiglu[0]->needs, std::vector<F>{F::kFusedSwiGlu});
  const std::vector<KernelVariant>& silu = hopper[1];
  ASSERT_EQ(silu.size(), 3u);
  EXPECT_EQ(silu[0].role, R::kStep);
  EXPECT_EQ(silu[1].role, R::kAbsorbed);
  expectRows(silu[1], 1, kSkinnyMaxRows);
  EXPECT_EQ(silu[2].role, R::kAbsorbedPrefill);
  expectRows(silu[2], kFusedSwiGluMinRows, RowRange::kUnbounded);
  EXPECT_EQ(silu[2].needs, swiglu[0]->needs) << "switched off together";
  expectAllGenerate(hopper);

  // Not before Hopper, nor where its tiles do not divide the shape, nor with a bias.
  for (const auto& plan : {select(gateUp(14336, 4096), "sm_80"), select(gateUp(200, 4096), "sm_90a"),
                           select(gateUp(14336, 4096, true), "sm_90a")}) {
    EXPECT_TRUE(ofRole(plan[0], R::kFusedPrefill).empty());
    EXPECT_TRUE(ofRole(plan[1], R::kAbsorbedPrefill).empty());
  }
}

TEST(KernelSelection, BlockQuantizedGemmsReadTheirBlocksAndExpandForCublas) {
  PlanEntry plan = gateUp(1536, 576);
  std::get<GemmParams>(plan.steps[0].params).weight_type = "q4_1";
  const auto list = select(plan, "sm_90a");
  const std::vector<KernelVariant>& gemm = list[0];
  ASSERT_EQ(gemm.size(), 4u);
  // gemm_quant: one 8-row x tile a block up to 8 rows, two up to kQuantGemmMaxRows.
  EXPECT_EQ(gemm[0].role, R::kSingleRow);
  expectRows(gemm[0], 1, kSkinnyMaxRows);
  EXPECT_EQ(gemm[0].params["weight_type"], "q4_1") << "the blocks, not bf16";
  EXPECT_FALSE(gemm[0].params.contains("gemv_stream")) << "the bulk-copy ring streams bf16 only";
  EXPECT_EQ(gemm[1].role, R::kSkinny);
  expectRows(gemm[1], kSkinnyMaxRows + 1, kQuantGemmMaxRows);
  EXPECT_EQ(gemm[1].params["gemv_max_rows"], 2 * kSkinnyMaxRows);
  EXPECT_EQ(gemm[2].role, R::kDequantize);
  EXPECT_EQ(gemm[2].params, (json{{"n", 3072}, {"k", 576}, {"weight_type", "q4_1"}}));
  expectRows(gemm[2], kQuantGemmMaxRows + 1, RowRange::kUnbounded);
  expectRows(gemm[3], kQuantGemmMaxRows + 1, RowRange::kUnbounded);
  EXPECT_EQ(gemm[3].role, R::kCublasLt);
  EXPECT_EQ(list[1].size(), 1u) << "no SwiGLU fold into a block-quantized gemm";
  expectAllGenerate(list);
  // Block types without kernels get no variants: the CUDA backend refuses the step.
  std::get<GemmParams>(plan.steps[0].params).weight_type = "q3_k";
  EXPECT_TRUE(select(plan, "sm_90a")[0].empty());
  // The K-quants run on their sub-blocks too (rows of whole 256-element super-blocks).
  for (const char* kquant : {"q4_k", "q5_k", "q6_k"}) {
    PlanEntry k_plan = gateUp(1536, 512);
    std::get<GemmParams>(k_plan.steps[0].params).weight_type = kquant;
    const auto k_list = select(k_plan, "sm_90a");
    ASSERT_EQ(k_list[0].size(), 4u) << kquant;
    EXPECT_EQ(k_list[0][0].params["weight_type"], kquant);
    expectAllGenerate(k_list);
  }
  // kiln's int4 (and int8) weights run as the q4_0 (q8_0) blocks the weight
  // store quantizes them into; fp8 has no CUDA GEMM yet.
  PlanEntry scaled;
  scaled.steps.push_back(step(StepKind::kGemm,
                              {{"n", 64}, {"k", 64}, {"weight_type", "int4"}, {"bias", false}, {"scales", true}},
                              {1, -1, -1}, {2}));
  const auto int4 = select(scaled, "sm_90a")[0];
  ASSERT_EQ(int4.size(), 4u);
  EXPECT_EQ(int4[0].params, (json{{"n", 64}, {"k", 64}, {"weight_type", "q4_0"}, {"bias", false}}));
  EXPECT_EQ(int4[2].params["weight_type"], "q4_0");
  expectAllGenerate({int4});
  // The tiles keep one scale a group where kiln's scheme shares it wider
  // than a block: int4 groups of 128, int8 per row (group = k); groups of
  // 32 are the blocks' own.
  for (auto [type, group, want] : {std::tuple{"int4", 32, 0}, std::tuple{"int4", 64, 64}, std::tuple{"int8", 64, 64}}) {
    PlanEntry grouped;
    grouped.steps.push_back(step(StepKind::kGemm,
                                 {{"n", 64}, {"k", 64}, {"weight_type", type}, {"bias", false}, {"scales", true},
                                  {"group", group}},
                                 {1, -1, -1}, {2}));
    const auto variants = select(grouped, "sm_90a")[0];
    ASSERT_EQ(variants.size(), 4u) << type << " group " << group;
    for (int v : {0, 1, 2}) EXPECT_EQ(variants[size_t(v)].params.value("group", 0), want) << type << " group " << group;
    EXPECT_EQ(gemmTileGroup(std::get<GemmParams>(grouped.steps[0].params)), want);
    expectAllGenerate({variants});
  }
  std::get<GemmParams>(scaled.steps[0].params).weight_type = "fp8";
  EXPECT_TRUE(select(scaled, "sm_90a")[0].empty());
  EXPECT_TRUE(select(scaled, "sm_90a", "f32")[0].empty());
}

// residual_rms_norm (x 1, residual 2) -> (sum 3, out 4), then gemm(4) -> 5,
// then add(5, 3): Llama-3-8B's qkv shape streams, so its single-row
// instance may fold the norm in.
PlanEntry normThenGemm() {
  const int64_t k = 4096;
  PlanEntry plan;
  plan.steps.push_back(step(StepKind::kResidualRmsNorm,
                            {{"hidden", k}, {"epsilon", 1e-5}, {"writes_sum", true}, {"x_type", "f32"},
                             {"sum_type", "f32"}},
                            {1, 2, -1}, {3, 4}));
  plan.steps.push_back(step(StepKind::kGemm, {{"n", 6144}, {"k", k}, {"weight_type", "bf16"}, {"bias", false}},
                            {4, -1}, {5}));
  plan.steps.push_back(step(StepKind::kAdd, {{"width", 6144}}, {5, 3}, {6}));
  plan.storage = {{1, {0, 4 * k}},       {2, {4 * k, 6 * k}},   {3, {6 * k, 10 * k}},
                  {4, {10 * k, 12 * k}}, {5, {12 * k, 24 * k}}, {6, {0, 4 * k}}};
  return plan;
}

TEST(KernelSelection, NormFoldsIntoTheStreamedSingleRowGemmOnSm90) {
  const auto hopper = select(normThenGemm(), "sm_90a");
  const auto folded = ofRole(hopper[0], R::kFoldedIntoNext);
  ASSERT_EQ(folded.size(), 1u);
  expectRows(*folded[0], 1, 1);
  const std::vector<F> both{F::kStreamGemv, F::kFoldNorms};
  EXPECT_EQ(folded[0]->needs, both);
  const auto single = ofRole(hopper[1], R::kSingleRow);
  ASSERT_EQ(single.size(), 3u);  // folded, streamed, plain
  EXPECT_EQ(single[0]->needs, both) << "the gemm's fold and the norm's go together";
  EXPECT_EQ(single[0]->params["norm_epsilon"], 1e-5);
  EXPECT_EQ(single[0]->params["norm_x_type"], "f32");
  EXPECT_FALSE(single[1]->params.contains("norm_epsilon"));
  expectAllGenerate(hopper);
  const auto ampere = select(normThenGemm(), "sm_80");
  EXPECT_TRUE(ofRole(ampere[0], R::kFoldedIntoNext).empty());
  EXPECT_EQ(ofRole(ampere[1], R::kSingleRow).size(), 1u);
}

// gemm(1) -> 2, residual_rms_norm(x 0, 2) -> (sum 3, out 4): cuBLASLt batches
// add the residual in the GEMM's epilogue.
PlanEntry gemmThenNorm(bool sum_over_input) {
  PlanEntry plan;
  plan.steps.push_back(step(StepKind::kGemm, {{"n", 64}, {"k", 64}, {"weight_type", "bf16"}, {"bias", false}},
                            {1, -1}, {2}));
  plan.steps.push_back(step(StepKind::kResidualRmsNorm,
                            {{"hidden", 64}, {"epsilon", 1e-5}, {"writes_sum", true}, {"x_type", "f32"},
                             {"sum_type", "f32"}},
                            {0, 2, -1}, {3, 4}));
  plan.storage = {{0, {0, 256}}, {1, {256, 384}}, {2, {384, 512}}, {3, {512, 768}}, {4, {768, 896}}};
  if (sum_over_input) plan.storage[3] = {256, 512};
  return plan;
}

TEST(KernelSelection, ResidualEpilogueAtDecodeSizesWithTheNormOverTheSum) {
  const auto plan = select(gemmThenNorm(false), "sm_80");
  const auto residual = ofRole(plan[0], R::kCublasLtResidual);
  ASSERT_EQ(residual.size(), 1u);
  expectRows(*residual[0], kSkinnyMaxRows + 1, kResidualEpilogueMaxRows);
  EXPECT_EQ(residual[0]->needs, std::vector<F>{F::kResidualEpilogue});
  const auto norm = ofRole(plan[1], R::kNormOfSum);
  ASSERT_EQ(norm.size(), 1u);
  expectRows(*norm[0], kSkinnyMaxRows + 1, kResidualEpilogueMaxRows);
  EXPECT_EQ(norm[0]->kind, "rms_norm");
  EXPECT_EQ(norm[0]->params, (json{{"epsilon", 1e-5}, {"hidden", 64}, {"x_type", "f32"}}));
  EXPECT_FALSE(norm[0]->own_storage);
  auto generated = instanceSource(norm[0]->kind, norm[0]->params, norm[0]->instance);
  ASSERT_TRUE(generated.ok()) << generated.error().message;
  EXPECT_NE(generated->source.find("kResidual = false"), std::string::npos);
  EXPECT_NE(generated->source.find("kWritesSum = false"), std::string::npos);
  // The planner put the sum over the gemm's input: cuBLASLt reads it while
  // writing D, so the sum gets storage of its own.
  EXPECT_TRUE(ofRole(select(gemmThenNorm(true), "sm_80")[1], R::kNormOfSum)[0]->own_storage);
}

// Makes every gemm of `plan` 2:4 sparse of `weight_type` (sp24, int8sp24,
// int4sp24; the quantized ones with their scales operand).
PlanEntry sparse24(PlanEntry plan, const std::string& weight_type = "sp24") {
  for (PlanStep& s : plan.steps) {
    if (s.kind != StepKind::kGemm) continue;
    GemmParams& gemm = std::get<GemmParams>(s.params);
    gemm.weight_type = weight_type;
    gemm.scales = weight_type != "sp24";
    gemm.group = weight_type == "int4sp24" ? 64 : weight_type == "int8sp24" ? gemm.k : 0;
    if (gemm.scales) s.value_args.insert(s.value_args.begin() + 2, -1);
  }
  return plan;
}

TEST(KernelSelection, SparseGemmsRunTheGemvThenTheSparseGemmByTarget) {
  const auto hopper = select(sparse24(gemmOnly(4096, 4096)), "sm_90a")[0];
  ASSERT_EQ(hopper.size(), 2u);
  EXPECT_EQ(hopper[0].role, R::kSparseGemv);
  EXPECT_EQ(hopper[0].kind, "sparse24_gemv");
  expectRows(hopper[0], 1, kSkinnyMaxRows);
  EXPECT_EQ(hopper[0].params, (json{{"n", 4096}, {"k", 4096}, {"values_type", "bf16"}, {"bias", false},
                                    {"out_type", "bf16"}}));
  EXPECT_EQ(hopper[1].role, R::kSparseGemm);
  EXPECT_EQ(hopper[1].kind, "sparse24_gemm_wgmma");
  expectRows(hopper[1], kSkinnyMaxRows + 1, RowRange::kUnbounded);
  expectAllGenerate({hopper});

  // mma.sp where k is not a multiple of the wgmma's 128-column stages, and before Hopper.
  EXPECT_EQ(select(sparse24(gemmOnly(4096, 576)), "sm_90a")[0][1].kind, "sparse24_gemm");
  const auto ampere = select(sparse24(gemmOnly(4096, 4096)), "sm_80");
  EXPECT_EQ(ampere[0][1].kind, "sparse24_gemm");
  expectAllGenerate(ampere);

  // The quantized kept values: the gemv reads their blocks, the GEMM bf16.
  for (const auto& [scheme, values] : {std::pair{"int8sp24", "q8_0"}, std::pair{"int4sp24", "q4_0"}}) {
    SCOPED_TRACE(scheme);
    const auto list = select(sparse24(gemmOnly(1024, 512), scheme), "sm_90a");
    ASSERT_EQ(list[0].size(), 2u);
    EXPECT_EQ(list[0][0].params["values_type"], values);
    EXPECT_EQ(list[0][1].params["values_type"], "bf16");
    EXPECT_FALSE(list[0][0].params.contains("scales")) << "folded into the blocks";
    expectAllGenerate(list);
  }
}

TEST(KernelSelection, SparseGemmsRunDenseInF32PlansAndBeforeAmpere) {
  EXPECT_EQ(sparse24RunsDense({"sm_90a", "bf16"}), "");
  EXPECT_EQ(sparse24RunsDense({"sm_80", "bf16"}), "");
  EXPECT_NE(sparse24RunsDense({"sm_75", "bf16"}).find("sm_75 has no sparse tensor cores"), std::string::npos);
  EXPECT_NE(sparse24RunsDense({"sm_90a", "f32"}).find("f32 activations"), std::string::npos);
  for (const char* scheme : {"sp24", "int8sp24", "int4sp24"}) {
    SCOPED_TRACE(scheme);
    for (const auto& list : {select(sparse24(gemmOnly(64, 64), scheme), "sm_90a", "f32"),
                             select(sparse24(gemmOnly(64, 64), scheme), "sm_75")}) {
      ASSERT_EQ(list[0].size(), 1u);
      EXPECT_EQ(list[0][0].role, R::kCublasLt) << "on the weight expanded to a dense matrix at load";
      expectRows(list[0][0], 1, RowRange::kUnbounded);
    }
  }
}

TEST(KernelSelection, SparseGemmsTakeNoFusions) {
  // gate/up -> silu_mul: the silu_mul runs as its own step at every row count.
  const auto gate_up = select(sparse24(gateUp(14336, 4096)), "sm_90a");
  for (const KernelVariant& v : gate_up[0]) EXPECT_TRUE(v.role == R::kSparseGemv || v.role == R::kSparseGemm);
  ASSERT_EQ(gate_up[1].size(), 1u);
  EXPECT_EQ(gate_up[1][0].role, R::kStep);
  expectRows(gate_up[1][0], 1, RowRange::kUnbounded);
  // No norm folded into the sparse gemm's single row, nor the residual
  // added by its epilogue.
  const auto norm = select(sparse24(normThenGemm()), "sm_90a");
  EXPECT_TRUE(ofRole(norm[0], R::kFoldedIntoNext).empty());
  const auto residual = select(sparse24(gemmThenNorm(false)), "sm_80");
  EXPECT_TRUE(ofRole(residual[0], R::kCublasLtResidual).empty());
  EXPECT_TRUE(ofRole(residual[1], R::kNormOfSum).empty());
  for (const SkinnyFusion& f : skinnyFusions(sparse24(gateUp(14336, 4096)))) {
    EXPECT_TRUE(f.gemm_params.is_null());
    EXPECT_FALSE(f.absorbed);
  }
}

TEST(KernelSelection, F32PlanRunsGemmsOnCublasAndTypedInstances) {
  PlanEntry plan = gateUp(64, 64);
  plan.steps.push_back(step(StepKind::kRmsNorm, {{"hidden", 64}, {"epsilon", 1e-5}}, {3, -1}, {4},
                            "rms_norm_epsilon1em05_hidden64"));
  json attention = kAttention;
  attention["kv_type"] = "f32";
  plan.steps.push_back(step(StepKind::kPagedAttention, attention, {4, -1, -1, -1, -1, -1}, {5}));
  const auto list = select(plan, "sm_90a", "f32");
  ASSERT_EQ(list[0].size(), 1u);
  EXPECT_EQ(list[0][0].role, R::kCublasLt);
  expectRows(list[0][0], 1, RowRange::kUnbounded);
  ASSERT_EQ(list[1].size(), 1u) << "no fusions in f32 plans";
  ASSERT_EQ(list[2].size(), 1u);
  EXPECT_EQ(list[2][0].instance, "rms_norm_epsilon1em05_hidden64_out_typef32_x_typef32");
  EXPECT_EQ(list[2][0].params, withActivationTypes("rms_norm", {{"hidden", 64}, {"epsilon", 1e-5}}, "f32"));
  EXPECT_EQ(select(plan, "sm_90a")[2][0].instance, "rms_norm_epsilon1em05_hidden64")
      << "a bf16 plan keeps the plan's name";
  ASSERT_EQ(list[3].size(), 3u);
  const std::vector<std::pair<R, std::string>> want = {
      {R::kStep, "paged_attention"}, {R::kDecode, "paged_attention_split"}, {R::kCombine, "attention_combine"}};
  for (size_t i = 0; i < want.size(); ++i) {
    const KernelVariant& v = list[3][i];
    EXPECT_EQ(v.role, want[i].first) << i;
    EXPECT_EQ(v.kind, want[i].second) << i;
    EXPECT_EQ(v.params.value("out_type", ""), "f32") << v.kind;
    auto generated = instanceSource(v.kind, v.params, v.instance);
    ASSERT_TRUE(generated.ok()) << generated.error().message;
    EXPECT_NE(generated->source.find("using Out = float;"), std::string::npos) << generated->source;
  }
  auto f16 = selectKernels(plan, {"sm_90a", "f16"});
  ASSERT_FALSE(f16.ok());
  EXPECT_NE(f16.error().message.find("activation type 'f16' has no CUDA kernels (bf16 or f32)"), std::string::npos)
      << f16.error().message;
}

// The state-space steps and the hybrid's rope-less KV append and squared
// ReLU: one instance each, typed f32 in an f32 plan; Mamba's dt_proj at a
// rank the skinny kernels do not tile (k 4) runs on cuBLASLt at every row
// count in a bf16 plan.
TEST(KernelSelection, StateSpaceAndHybridStepsGetTypedInstances) {
  PlanEntry plan;
  plan.steps.push_back(step(StepKind::kSsmConv1d, {{"channels", 128}, {"width", 4}, {"silu", true}, {"bias", true}},
                            {1, -1, -1, -1, -1, -1}, {2}, ""));
  plan.steps.push_back(step(StepKind::kKvAppend, {{"kv_heads", 2}, {"head_dim", 16}, {"page_size", 16},
                                                  {"kv_type", "f32"}},
                            {3, 4, -1, -1, -1}, {}, ""));
  plan.steps.push_back(step(StepKind::kReluSquared, {{"width", 96}}, {5}, {6}, ""));
  plan.steps.push_back(
      step(StepKind::kGemm, {{"n", 128}, {"k", 4}, {"weight_type", "f32"}, {"bias", true}}, {7, -1, -1}, {8}, ""));
  const auto f32 = select(plan, "sm_90a", "f32");
  const std::vector<std::pair<std::string, std::string>> want = {
      {"ssm_conv1d", "using X = float;"}, {"kv_append", "using Kv = float;"}, {"relu_squared", "OpReluSquared"}};
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(f32[i].size(), 1u) << want[i].first;
    const KernelVariant& v = f32[i][0];
    EXPECT_EQ(v.role, R::kStep);
    EXPECT_EQ(v.kind, want[i].first);
    auto generated = instanceSource(v.kind, v.params, v.instance);
    ASSERT_TRUE(generated.ok()) << generated.error().message;
    EXPECT_NE(generated->source.find(want[i].second), std::string::npos) << generated->source;
    EXPECT_NE(generated->source.find("float"), std::string::npos) << "f32 operands: " << generated->source;
  }
  const auto bf16 = select(plan, "sm_90a");
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(bf16[i].size(), 1u) << want[i].first;
  EXPECT_EQ(bf16[1][0].params.value("kv_type", ""), "f32");
  ASSERT_EQ(bf16[3].size(), 1u);
  EXPECT_EQ(bf16[3][0].role, R::kCublasLt);
  expectRows(bf16[3][0], 1, RowRange::kUnbounded);
  expectAllGenerate(bf16);
  // int8 pools hold scaled rows: kv_append writes float pools only.
  auto int8 = instanceSource("kv_append", {{"kv_heads", 2}, {"head_dim", 16}, {"page_size", 16}, {"kv_type", "int8"}},
                             "kv_append_int8");
  ASSERT_FALSE(int8.ok());
  EXPECT_NE(int8.error().message.find("kv_type"), std::string::npos) << int8.error().message;
}

TEST(KernelSelection, VariantsRoundTripThroughThePlanAndChooseByFeature) {
  const auto hopper = select(normThenGemm(), "sm_90a");
  for (size_t s = 0; s < hopper.size(); ++s)
    for (size_t i = 0; i < hopper[s].size(); ++i) {
      const KernelVariant& v = hopper[s][i];
      auto back = variantFromJson(toJson(v), normThenGemm().steps[s].kind, "variants");
      ASSERT_TRUE(back.ok()) << back.error().message;
      EXPECT_EQ(toJson(*back), toJson(v));
    }
  // All features on: the folded instance; fold_norms off: the streamed one,
  // and the norm no longer folded; stream_gemv off: the plain one.
  auto singleRow = [&](const KernelFeatures& f) {
    for (const KernelVariant* v : chooseVariants(hopper[1], f))
      if (v->role == R::kSingleRow) return v;
    return static_cast<const KernelVariant*>(nullptr);
  };
  auto normFolded = [&](const KernelFeatures& f) {
    for (const KernelVariant* v : chooseVariants(hopper[0], f))
      if (v->role == R::kFoldedIntoNext) return true;
    return false;
  };
  const auto single = ofRole(hopper[1], R::kSingleRow);
  EXPECT_EQ(singleRow({}), single[0]);
  EXPECT_TRUE(normFolded({}));
  EXPECT_EQ(singleRow({.fold_norms = false}), single[1]);
  EXPECT_FALSE(normFolded({.fold_norms = false}));
  EXPECT_EQ(singleRow({.stream_gemv = false}), single[2]);
  EXPECT_FALSE(normFolded({.stream_gemv = false}));
}

}  // namespace
}  // namespace kiln::cuda_codegen
