#include "codegen/cuda/activation_types.h"
#include "codegen/cuda/instance_source.h"
#include "codegen/cuda/step_instances.h"
#include "runtime/artifact/step_params_json.h"
#include "codegen/kernels/decode_attention.cuh"  // decode:: shape helpers (host-visible part)

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <tuple>

#include <unistd.h>

namespace kiln::cuda_codegen {
namespace {

using nlohmann::json;

// A plan step of `kind` named `instance`, its params read through the plan
// schema as a loaded manifest's are.
Step planStep(std::string_view kind, const json& params, const std::string& instance) {
  Step step;
  step.kind = *parseStepKind(kind);
  step.instance = instance;
  auto values = paramsFromJson(params, "params");
  EXPECT_TRUE(values.ok()) << values.error().message;
  if (!values.ok()) return step;
  auto typed = parseStepParams(step.kind, *values, "params");
  EXPECT_TRUE(typed.ok()) << typed.error().message;
  if (typed.ok()) step.params = typed.take();
  return step;
}

Result<std::vector<StepInstance>> stepInstances(std::string_view kind, const json& params, const std::string& instance,
                                                const StepInstanceOptions& options = {}) {
  return cuda_codegen::stepInstances(planStep(kind, params, instance), options);
}

TEST(InstanceSource, RmsNormIsAFewReadableLines) {
  auto inst = instanceSource("rms_norm", json{{"hidden", 576}, {"epsilon", 1e-5}}, "rms_norm_h576");
  ASSERT_TRUE(inst.ok()) << inst.error().message;
  const std::string& s = inst->source;
  EXPECT_NE(s.find("#include \"rms_norm.cuh\""), std::string::npos) << s;
  EXPECT_NE(s.find("static constexpr int kHidden = 576;"), std::string::npos) << s;
  EXPECT_NE(s.find("static constexpr float kEpsilon = 9.99999975e-06f;"), std::string::npos) << s;
  EXPECT_NE(s.find("extern \"C\" __global__ void __launch_bounds__(96) rms_norm_h576("), std::string::npos) << s;
  EXPECT_EQ(inst->launch.block_threads, 96);
  EXPECT_LT(std::count(s.begin(), s.end(), '\n'), 30);
}

TEST(InstanceSource, NameFromParams) {
  EXPECT_EQ(instanceName("rms_norm", json{{"hidden", 576}, {"epsilon", 1e-5}}), "rms_norm_epsilon1em05_hidden576");
  EXPECT_EQ(instanceName("silu_mul", json{{"ffn", 1536}, {"merged_gate_up", true}}), "silu_mul_ffn1536_merged_gate_up1");
  auto two = instanceSource("add", json{{"width", 64}});
  ASSERT_TRUE(two.ok());
  EXPECT_NE(two->find("void __launch_bounds__(256) add_width64("), std::string::npos);
}

TEST(InstanceSource, UnknownKindListsKnownOnes) {
  auto r = instanceSource("flux_capacitor", json::object());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("'flux_capacitor'"), std::string::npos);
  EXPECT_NE(r.error().message.find("paged_attention"), std::string::npos);
}

TEST(InstanceSource, BadParamsNameKindAndParam) {
  auto missing = instanceSource("rms_norm", json{{"hidden", 576}});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "rms_norm: param 'epsilon' is missing");
  auto typed = instanceSource("rms_norm", json{{"hidden", "wide"}, {"epsilon", 1e-5}});
  ASSERT_FALSE(typed.ok());
  EXPECT_EQ(typed.error().message, "rms_norm: param 'hidden' is \"wide\", expected an integer");
  auto odd = instanceSource("rms_norm", json{{"hidden", 100}, {"epsilon", 1e-5}});
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error().message.find("multiple of 8"), std::string::npos);
  auto gqa = instanceSource("paged_attention", json{{"heads", 9}, {"kv_heads", 2}, {"head_dim", 64},
                                                    {"page_size", 16}, {"scale", 0.125},
                                                    {"kv_type", "bf16"}, {"tree_mask", false}});
  ASSERT_FALSE(gqa.ok());
  EXPECT_NE(gqa.error().message.find("not a multiple of kv_heads"), std::string::npos);
  // The warpgroup prefill kernel: bf16 pools, causal only, head_dim 64 or 128.
  json wgmma = {{"heads", 32}, {"kv_heads", 8}, {"head_dim", 128}, {"page_size", 16},
                {"scale", 0.088}, {"kv_type", "bf16"}, {"tree_mask", false}};
  ASSERT_TRUE(instanceSource("flash_attention_wgmma", wgmma).ok());
  for (auto [param, value, message] :
       {std::tuple{"kv_type", json("f32"), "flash_attention_wgmma: kv_type 'f32' has no tensor-core kernel (bf16 pools only)"},
        std::tuple{"tree_mask", json(true),
                   "flash_attention_wgmma: tree_mask is true; the tensor-core kernel is causal only (use paged_attention)"},
        std::tuple{"head_dim", json(96), "flash_attention_wgmma: param 'head_dim' is 96, expected 64 or 128"},
        std::tuple{"scale", json(0.0), "flash_attention_wgmma: param 'scale' is 0, expected > 0"}}) {
    json bad = wgmma;
    bad[param] = value;
    auto r = instanceSource("flash_attention_wgmma", bad);
    ASSERT_FALSE(r.ok()) << param;
    EXPECT_EQ(r.error().message, message);
  }
  auto style = instanceSource("embedding", json{{"hidden", 576}, {"table_type", "q5_k"}});
  ASSERT_FALSE(style.ok());
  EXPECT_NE(style.error().message.find("'q5_k'"), std::string::npos);
  auto quant = instanceSource("gemm", json{{"n", 960}, {"k", 576}, {"weight_type", "q4_1"}, {"bias", false}});
  ASSERT_FALSE(quant.ok());
  EXPECT_NE(quant.error().message.find("q4_1"), std::string::npos);
  auto name = instanceSource("add", json{{"width", 64}}, "bad name;");
  ASSERT_FALSE(name.ok());
  // The qkv gemm with rope as its epilogue: n must be the whole merged
  // projection, and it takes one epilogue.
  json rope_gemm = {{"n", 4096}, {"k", 4096}, {"weight_type", "bf16"}, {"bias", false}, {"heads", 32},
                    {"kv_heads", 8}, {"head_dim", 128}, {"page_size", 16}, {"merged_qkv", true},
                    {"kv_type", "bf16"}, {"rope_theta", 500000.0}, {"rope_style", "half"},
                    {"rope_scaling", "none"}, {"rope_factor", 1.0}, {"rope_low_freq_factor", 1.0},
                    {"rope_high_freq_factor", 4.0}, {"rope_original_max_position", 8192},
                    {"rope_kv_append", true}};
  auto short_n = instanceSource("gemm", rope_gemm);
  ASSERT_FALSE(short_n.ok());
  EXPECT_EQ(short_n.error().message,
            "gemm: param 'n' is 4096 with rope_kv_append (merged_qkv true), expected the merged qkv "
            "projection's (heads 32 + 2 x kv_heads 8) x head_dim 128");
  rope_gemm["n"] = 6144;
  ASSERT_TRUE(instanceSource("gemm", rope_gemm).ok());
  rope_gemm["silu_mul"] = true;
  auto both = instanceSource("gemm", rope_gemm);
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.error().message, "gemm: params 'silu_mul' and 'rope_kv_append' both set, expected one epilogue");
  rope_gemm.erase("silu_mul");
  rope_gemm["rope_style"] = "spiral";
  auto style_bad = instanceSource("gemm", rope_gemm);
  ASSERT_FALSE(style_bad.ok());
  EXPECT_EQ(style_bad.error().message, "gemm: param 'rope_style' is 'spiral', expected 'half' or 'interleaved'");
}

TEST(InstanceSource, FloatLiteralsRoundTrip) {
  auto inst = instanceSource("rope_kv_append",
                             json{{"heads", 9}, {"kv_heads", 3}, {"head_dim", 64}, {"page_size", 16},
                                  {"merged_qkv", true}, {"kv_type", "bf16"}, {"rope_theta", 100000.0},
                                  {"rope_style", "interleaved"}, {"rope_scaling", "none"},
                                  {"rope_factor", 1.0}, {"rope_low_freq_factor", 1.0},
                                  {"rope_high_freq_factor", 4.0}, {"rope_original_max_position", 8192}},
                             "rope");
  ASSERT_TRUE(inst.ok()) << inst.error().message;
  EXPECT_NE(inst->source.find("kTheta = 100000.0f;"), std::string::npos) << inst->source;
  EXPECT_NE(inst->source.find("kInterleaved = true;"), std::string::npos);
}

TEST(InstanceSource, DecodeAttentionLaunchAndLimits) {
  json params{{"heads", 32}, {"kv_heads", 8}, {"head_dim", 128}, {"page_size", 16},
              {"scale", 0.08838834764831845}, {"kv_type", "bf16"}, {"tree_mask", false}};
  auto inst = instanceSource("decode_attention", params, "dec");
  ASSERT_TRUE(inst.ok()) << inst.error().message;
  EXPECT_EQ(inst->launch.block_threads, 128);
  EXPECT_EQ(inst->launch.params_struct, "PagedAttentionParams");
  EXPECT_EQ(inst->launch.grid,
            "[N, kv_heads=8, splits=num_splits], dynamic smem 98304 bytes (kSmemBytes), 64 keys per tile");
  EXPECT_NE(inst->source.find("#include \"decode_attention.cuh\""), std::string::npos) << inst->source;
  EXPECT_NE(inst->source.find("kiln::kernels::decode_attention_mma<Config>(p);"), std::string::npos) << inst->source;
  EXPECT_NE(inst->source.find("kSmemBytes = 98304;"), std::string::npos) << inst->source;
  // Two blocks of the tensor-core form fit an SM (228 KiB) at either head_dim.
  EXPECT_LE(2 * kiln::kernels::decode::mma_smem_bytes(128, kiln::kernels::decode::kMmaDefaultStages), 228 * 1024);
  json core = params;
  core["mma"] = false;
  auto cuda_cores = instanceSource("decode_attention", core, "dec_core");
  ASSERT_TRUE(cuda_cores.ok()) << cuda_cores.error().message;
  EXPECT_EQ(cuda_cores->launch.grid,
            "[N, kv_heads=8, splits=num_splits], static smem 49152 bytes, 32 keys per tile");
  EXPECT_NE(cuda_cores->source.find("kiln::kernels::decode_attention<Config>(p);"), std::string::npos);
  EXPECT_NE(cuda_cores->source.find("kChunks = 2;"), std::string::npos) << cuda_cores->source;
  EXPECT_NE(cuda_cores->source.find("kTileKeys = 32;"), std::string::npos) << cuda_cores->source;
  json f32 = params;
  f32["kv_type"] = "f32";
  auto f32_inst = instanceSource("decode_attention", f32, "dec_f32");  // f32 pools: CUDA cores
  ASSERT_TRUE(f32_inst.ok()) << f32_inst.error().message;
  EXPECT_NE(f32_inst->source.find("kiln::kernels::decode_attention<Config>(p);"), std::string::npos);
  auto expectError = [&](const json& changes, const char* needle) {
    json p = params;
    p.update(changes);
    auto r = instanceSource("decode_attention", p);
    ASSERT_FALSE(r.ok()) << p.dump();
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
  };
  expectError(json{{"tree_mask", true}}, "tree_mask");
  expectError(json{{"head_dim", 96}}, "head_dim");
  expectError(json{{"kv_heads", 1}}, "above 16");
  expectError(json{{"kv_type", "f16"}}, "f16");
  expectError(json{{"mma", false}, {"chunks", 2}, {"keys", 4}, {"stages", 3}}, "48 KiB");
  expectError(json{{"mma", false}, {"keys", 3}}, "'keys'");
  expectError(json{{"mma", false}, {"page_size", 2}, {"chunks", 1}, {"keys", 4}}, "page size");
  expectError(json{{"chunks", 1}}, "mma false");
  expectError(json{{"mma", true}, {"page_size", 8}}, "multiple of 16");
  expectError(json{{"stages", 9}}, "'stages'");
}

TEST(WriteInstanceSources, WritesOnlyChangedFilesAndListsUnsupported) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("kiln_codegen_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Two steps of one instance, a weight type with no CUDA kernel, an add.
  const json manifest = json::parse(R"({
    "format": "kiln-artifact", "version": 1,
    "model": {"source": "/models/x.gguf", "source_format": "gguf", "source_size": 1, "source_mtime": 0,
              "config": {"architecture": "llama", "vocab_size": 64, "hidden_size": 64, "num_layers": 1}},
    "activation_type": "bf16",
    "weights": [{"id": 0, "name": "norm", "type": "f32", "shape": [64], "source": "norm"},
                {"id": 1, "name": "w", "type": "q4_1", "shape": [64, 64], "source": "w"}],
    "kv_cache": {"layers": 1, "page_size": 16, "kv_heads": 1, "head_dim": 64, "type": "bf16"},
    "entries": {"forward": {
      "inputs": [{"name": "tokens", "type": "i32", "shape": [-1]}],
      "values": [{"id": 0, "type": "bf16", "shape": [-1, 64], "rows": "tokens", "row_bytes": 128, "offset": 0},
                 {"id": 1, "type": "bf16", "shape": [-1, 64], "rows": "tokens", "row_bytes": 128, "offset": 128},
                 {"id": 2, "type": "bf16", "shape": [-1, 64], "rows": "tokens", "row_bytes": 128, "offset": 256},
                 {"id": 3, "type": "bf16", "shape": [-1, 64], "rows": "tokens", "row_bytes": 128, "offset": 0}],
      "arena": {"bytes_per_token": 384},
      "steps": [
        {"kind": "rms_norm", "instance": "norm_a", "params": {"hidden": 64, "epsilon": 1e-6},
         "args": [{"value": 0}, {"weight": 0}], "results": [1]},
        {"kind": "rms_norm", "instance": "norm_a", "params": {"hidden": 64, "epsilon": 1e-6},
         "args": [{"value": 1}, {"weight": 0}], "results": [2]},
        {"kind": "gemm", "instance": "gemm_q", "params": {"n": 64, "k": 64, "weight_type": "q4_1", "bias": false},
         "args": [{"value": 2}, {"weight": 1}], "results": [3]},
        {"kind": "add", "instance": "add_64", "params": {"width": 64},
         "args": [{"value": 3}, {"value": 2}], "results": [0]}],
      "outputs": [{"name": "logits", "value": 0}]}}
  })");
  std::ofstream(dir / "manifest.json") << manifest.dump();
  auto first = writeInstanceSources(dir);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(first->written, (std::vector<std::string>{"norm_a", "add_64"}));
  ASSERT_EQ(first->unsupported.size(), 1u);
  EXPECT_NE(first->unsupported[0].find("gemm_q (gemm)"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir / "kernels" / "norm_a.cu"));
  auto second = writeInstanceSources(dir);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->written.empty());
  EXPECT_EQ(second->unchanged.size(), 2u);
  fs::remove_all(dir);

  auto missing = writeInstanceSources(dir);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("manifest.json"), std::string::npos);
}

// A residual_rms_norm whose sum the gemm before it writes (cuBLASLt
// batches) also gets the rms_norm over that sum, which generates and reads
// only x (no residual, no sum written).
TEST(StepInstances, ResidualNormGetsTheNormOfTheGemmsSum) {
  const json norm = {{"epsilon", 1e-5}, {"hidden", 4096}, {"x_type", "f32"}, {"sum_type", "f32"}, {"writes_sum", true}};
  auto plain = stepInstances("residual_rms_norm", norm, "norm_l0");
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_EQ(plain->size(), 1u);
  StepInstanceOptions options;
  options.norm_of_sum = {{"epsilon", 1e-5}, {"hidden", 4096}, {"x_type", "f32"}};
  auto list = stepInstances("residual_rms_norm", norm, "norm_l0", options);
  ASSERT_TRUE(list.ok()) << list.error().message;
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[1].kind, "rms_norm");
  EXPECT_STREQ(instanceRoleName((*list)[1].role), "norm_of_sum");
  EXPECT_EQ((*list)[1].name, "rms_norm_epsilon1em05_hidden4096_x_typef32") << "the final norm's instance: compiled once";
  auto generated = instanceSource((*list)[1].kind, (*list)[1].params, (*list)[1].name);
  ASSERT_TRUE(generated.ok()) << generated.error().message;
  EXPECT_NE(generated->source.find("kResidual = false"), std::string::npos);
  EXPECT_NE(generated->source.find("kWritesSum = false"), std::string::npos);
  EXPECT_NE(generated->source.find("using X = float"), std::string::npos);
}

TEST(StepInstances, AttentionGetsDecodeCombineAndPrefillKernels) {
  const json attention = {{"heads", 32}, {"kv_heads", 8}, {"head_dim", 128}, {"page_size", 16},
                          {"scale", 0.08838834764831845}, {"kv_type", "bf16"}, {"tree_mask", false}};
  auto list = stepInstances("paged_attention", attention, "attn_l0");
  ASSERT_TRUE(list.ok()) << list.error().message;
  ASSERT_EQ(list->size(), 4u);
  EXPECT_EQ((*list)[0].role, InstanceRole::kStep);
  EXPECT_EQ((*list)[0].name, "attn_l0");
  EXPECT_EQ((*list)[1].kind, "decode_attention");
  EXPECT_EQ((*list)[2].kind, "attention_combine");
  EXPECT_EQ((*list)[2].params, (json{{"heads", 32}, {"head_dim", 128}}));
  // Hopper (the default target) gets the warpgroup kernel, other targets mma.sync's.
  EXPECT_EQ((*list)[3].kind, "flash_attention_wgmma");
  EXPECT_STREQ(instanceRoleName((*list)[3].role), "prefill");
  for (const StepInstance& inst : *list) {  // each one generates; only the wgmma one needs sm_90a
    auto generated = instanceSource(inst.kind, inst.params, inst.name);
    ASSERT_TRUE(generated.ok()) << inst.kind;
    EXPECT_EQ(generated->arch, inst.kind == "flash_attention_wgmma" ? "sm_90a" : "") << inst.kind;
  }
  EXPECT_TRUE(warpgroupMmaTarget("sm_90"));
  EXPECT_TRUE(warpgroupMmaTarget("sm_90a"));
  EXPECT_FALSE(warpgroupMmaTarget("sm_80"));
  EXPECT_FALSE(warpgroupMmaTarget("sm_100"));
  EXPECT_TRUE(bulkCopyTarget("sm_90"));
  EXPECT_TRUE(bulkCopyTarget("sm_90a"));
  EXPECT_TRUE(bulkCopyTarget("sm_100"));
  EXPECT_FALSE(bulkCopyTarget("sm_89"));
  EXPECT_FALSE(bulkCopyTarget("compute_90"));
  auto pre_hopper = stepInstances("paged_attention", attention, "attn_l0", {.wgmma = false, .skinny_fusion = {}});
  ASSERT_TRUE(pre_hopper.ok());
  ASSERT_EQ(pre_hopper->size(), 4u);
  EXPECT_EQ((*pre_hopper)[3].kind, "flash_attention");

  // No tensor-core prefill for f32 pools or when it is turned off; tree
  // masks keep the step's own kernel only.
  json f32 = attention;
  f32["kv_type"] = "f32";
  auto f32_list = stepInstances("paged_attention", f32, "attn_f32");
  ASSERT_TRUE(f32_list.ok());
  EXPECT_EQ(f32_list->size(), 3u);
  auto no_flash = stepInstances("paged_attention", attention, "attn_l0", {.flash_attention = false, .skinny_fusion = {}});
  EXPECT_EQ(no_flash->size(), 3u);
  json tree = attention;
  tree["tree_mask"] = true;
  EXPECT_EQ(stepInstances("paged_attention", tree, "attn_tree")->size(), 1u);
}

TEST(StepInstances, GemmWeightsBecomeBf16AndLongNamesAreBounded) {
  auto list = stepInstances("gemm", {{"n", 64}, {"k", 64}, {"weight_type", "f32"}, {"bias", false}}, "gemm_f32");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);  // the step's instance and its single-row twin
  for (const StepInstance& inst : *list) {
    EXPECT_EQ(inst.params["weight_type"], "bf16");
    EXPECT_EQ(inst.name, instanceName("gemm", inst.params));
  }
  EXPECT_EQ((*list)[0].role, InstanceRole::kStep);
  EXPECT_EQ((*list)[1].role, InstanceRole::kSingleRow);
  EXPECT_EQ((*list)[1].params["gemv_max_rows"], 1);
  auto single = instanceSource("gemm", (*list)[1].params, (*list)[1].name);
  ASSERT_TRUE(single.ok()) << single.error().message;
  EXPECT_NE(single->source.find("kMaxRows = 1;"), std::string::npos) << single->source;
  auto three = instanceSource("gemm", {{"n", 64}, {"k", 64}, {"weight_type", "bf16"}, {"bias", false}, {"gemv_max_rows", 3}});
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.error().message.find("expected 1 or 8"), std::string::npos) << three.error().message;

  // Streamed (gemv_stream.cuh) where asked and where W fits the rule: bf16
  // rows of whole 2048-column chunks, at most 256 MiB; else gemv.cuh.
  StepInstanceOptions no_stream;
  no_stream.stream_gemv = false;
  EXPECT_FALSE(stepInstances("gemm", {{"n", 64}, {"k", 2048}, {"weight_type", "bf16"}, {"bias", false}}, "g",
                             no_stream)->at(1).params.contains("gemv_stream"));
  auto streamed = [](int64_t n, int64_t k, nlohmann::json extra = nlohmann::json::object()) {
    nlohmann::json p{{"n", n}, {"k", k}, {"weight_type", "bf16"}, {"bias", false}};
    StepInstanceOptions fusion;  // `extra`: the fused variant's params (skinny_fusion.h)
    if (!extra.empty()) fusion.skinny_fusion = extra;
    auto list = stepInstances("gemm", p, "g", fusion);
    EXPECT_TRUE(list.ok());
    const InstanceRole role = extra.empty() ? InstanceRole::kSingleRow : InstanceRole::kFusedSingleRow;
    auto single = std::find_if(list->begin(), list->end(), [&](const StepInstance& i) { return i.role == role; });
    EXPECT_NE(single, list->end());
    EXPECT_EQ(single->params.value("gemv_stream", false), streamsSingleRowGemm(n, k)) << "named only where it streams";
    auto src = instanceSource("gemm", single->params, single->name);
    EXPECT_TRUE(src.ok()) << src.error().message;
    const bool is_stream = src->source.find("gemv_stream.cuh") != std::string::npos;
    if (is_stream)  // the executor checks the device's opt-in shared memory against this
      EXPECT_NE(src->source.find(fmt::format("kSmemBytes = {};", gemvStreamSharedBytes())), std::string::npos);
    return is_stream;
  };
  EXPECT_TRUE(streamed(4096, 14336));
  EXPECT_TRUE(streamed(28672, 4096, {{"silu_mul", true}}));
  EXPECT_FALSE(streamed(128256, 4096));  // the LM head: 1 GB
  EXPECT_FALSE(streamed(960, 576));      // rows of less than a chunk
  auto eight = instanceSource("gemm", {{"n", 4096}, {"k", 4096}, {"weight_type", "bf16"}, {"bias", false},
                                       {"gemv_stream", true}});
  ASSERT_TRUE(eight.ok());
  EXPECT_EQ(eight->find("gemv_stream.cuh"), std::string::npos) << "8-row instances keep gemv.cuh";
  // A folded norm needs the streamed instance, and a positive epsilon.
  const nlohmann::json fold = {{"n", 4096}, {"k", 4096}, {"weight_type", "bf16"}, {"bias", false},
                               {"gemv_max_rows", 1}, {"gemv_stream", true}, {"norm_epsilon", 1e-5},
                               {"norm_x_type", "f32"}, {"norm_sum_type", "f32"}, {"norm_writes_sum", true}};
  auto folded = instanceSource("gemm", fold);
  ASSERT_TRUE(folded.ok()) << folded.error().message;
  EXPECT_NE(folded->find("kNormFold = true;"), std::string::npos) << *folded;
  nlohmann::json unstreamed = fold;
  unstreamed["k"] = 576;
  auto k576 = instanceSource("gemm", unstreamed);
  ASSERT_FALSE(k576.ok());
  EXPECT_NE(k576.error().message.find("needs the streamed single-row instance"), std::string::npos)
      << k576.error().message;
  EXPECT_NE(k576.error().message.find("k is 576"), std::string::npos) << k576.error().message;
  nlohmann::json bad_epsilon = fold;
  bad_epsilon["norm_epsilon"] = 0.0;
  auto zero = instanceSource("gemm", bad_epsilon);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message.find("'norm_epsilon' is 0, expected > 0"), std::string::npos) << zero.error().message;
  nlohmann::json bad_flag = fold;
  bad_flag["gemv_stream"] = "yes";
  EXPECT_FALSE(instanceSource("gemm", bad_flag).ok()) << "gemv_stream must be a boolean";

  const std::string long_name(300, 'x');
  const std::string bounded = boundedInstanceName(long_name);
  EXPECT_LE(bounded.size(), 160u);
  EXPECT_NE(bounded, boundedInstanceName(std::string(299, 'x') + "y"));  // the hash tells them apart
  EXPECT_EQ(boundedInstanceName("short"), "short");
}

// An f32 plan names none of its activation types (all are the plan's):
// they are filled in, explicit ones kept; a bf16 plan's params stay as the
// manifest wrote them.
TEST(ActivationTypes, AnF32PlanNamesEveryActivationType) {
  const json norm{{"hidden", 64}, {"epsilon", 1e-5}, {"writes_sum", true}, {"sum_type", "bf16"}};
  EXPECT_EQ(withActivationTypes("residual_rms_norm", norm, "f32"),
            (json{{"hidden", 64}, {"epsilon", 1e-5}, {"writes_sum", true}, {"x_type", "f32"},
                  {"residual_type", "f32"}, {"sum_type", "bf16"}, {"out_type", "f32"}}));
  EXPECT_EQ(withActivationTypes("residual_rms_norm", norm, "bf16"), norm);
  EXPECT_EQ(withActivationTypes("paged_attention", json{{"heads", 4}}, "f32"),
            (json{{"heads", 4}, {"q_type", "f32"}, {"out_type", "f32"}}));
  EXPECT_EQ(withActivationTypes("gemm", json{{"n", 64}}, "f32"), (json{{"n", 64}})) << "cuBLASLt's, untyped";
  EXPECT_EQ(activationTypeParams("residual_rms_norm").results_from_last,
            (std::vector<const char*>{"out_type", "sum_type"}));
}

// The templates whose q / x / out were bf16 only take them from Config; a
// bf16 plan's instances spell bf16 (the same code as before), an f32 plan's
// float.
TEST(InstanceSource, AttentionRopeAndSiluMulTypesComeFromConfig) {
  const json attention{{"heads", 32}, {"kv_heads", 8}, {"head_dim", 128}, {"page_size", 16},
                       {"scale", 0.08838834764831845}, {"kv_type", "f32"}, {"tree_mask", false}};
  auto bf16 = instanceSource("paged_attention", attention, "attn");
  ASSERT_TRUE(bf16.ok()) << bf16.error().message;
  EXPECT_NE(bf16->source.find("  using Q = kiln::kernels::bf16;\n  using Out = kiln::kernels::bf16;\n"),
            std::string::npos) << bf16->source;
  auto f32 = instanceSource("paged_attention_split", withActivationTypes("paged_attention_split", attention, "f32"),
                            "attn_split");
  ASSERT_TRUE(f32.ok()) << f32.error().message;
  EXPECT_NE(f32->source.find("  using Kv = float;\n  using Q = float;\n  using Out = float;\n"), std::string::npos)
      << f32->source;
  auto combine = instanceSource("attention_combine", json{{"heads", 32}, {"head_dim", 128}, {"out_type", "f32"}},
                                "combine");
  ASSERT_TRUE(combine.ok()) << combine.error().message;
  EXPECT_NE(combine->source.find("  using Out = float;\n"), std::string::npos) << combine->source;
  auto silu = instanceSource("silu_mul", json{{"ffn", 128}, {"merged_gate_up", true}, {"x_type", "f32"},
                                              {"out_type", "f32"}}, "silu");
  ASSERT_TRUE(silu.ok()) << silu.error().message;
  EXPECT_NE(silu->source.find("  using X = float;\n  using Out = float;\n"), std::string::npos) << silu->source;
  json rope{{"heads", 4}, {"kv_heads", 2}, {"head_dim", 16}, {"page_size", 16}, {"merged_qkv", true},
            {"kv_type", "f32"}, {"rope_theta", 10000.0}, {"rope_style", "half"}, {"rope_scaling", "none"},
            {"rope_factor", 1.0}, {"rope_low_freq_factor", 1.0}, {"rope_high_freq_factor", 4.0},
            {"rope_original_max_position", 256}};
  auto rope_bf16 = instanceSource("rope_kv_append", rope, "rope");
  ASSERT_TRUE(rope_bf16.ok()) << rope_bf16.error().message;
  EXPECT_NE(rope_bf16->source.find("  using X = kiln::kernels::bf16;\n  using QOut = kiln::kernels::bf16;\n"),
            std::string::npos) << rope_bf16->source;
  auto rope_f32 = instanceSource("rope_kv_append", withActivationTypes("rope_kv_append", rope, "f32"), "rope");
  ASSERT_TRUE(rope_f32.ok()) << rope_f32.error().message;
  EXPECT_NE(rope_f32->source.find("  using X = float;\n  using QOut = float;\n"), std::string::npos)
      << rope_f32->source;
  // The gemm with rope as its epilogue reads x itself: its Config names neither.
  rope.update({{"n", 128}, {"k", 64}, {"weight_type", "bf16"}, {"bias", false}, {"rope_kv_append", true}});
  auto fused = instanceSource("gemm", rope, "fused");
  ASSERT_TRUE(fused.ok()) << fused.error().message;
  EXPECT_EQ(fused->source.find("using QOut"), std::string::npos) << fused->source;
  // The kernels that read bf16 queries refuse others, naming the param.
  json typed = attention;
  typed["kv_type"] = "bf16";
  typed["q_type"] = "f32";
  for (const char* kind : {"decode_attention", "flash_attention", "flash_attention_wgmma"}) {
    auto r = instanceSource(kind, typed);
    ASSERT_FALSE(r.ok()) << kind;
    EXPECT_EQ(r.error().message, std::string(kind) +
                                     ": param 'q_type' is 'f32'; the kernel takes bf16 q and out (paged_attention "
                                     "takes f32)");
  }
}

// A gate/up gemm with its silu_mul folded in gets, on Hopper, the
// gemm_swiglu instance that prefill batches run (sm_90a, params as a
// __grid_constant__ for its tensor maps); not elsewhere, nor where its tiles
// do not divide the shape, nor with a bias.
TEST(StepInstances, SwiGluGemmGetsFusedPrefillOnHopper) {
  const json gate_up{{"n", 28672}, {"k", 4096}, {"weight_type", "bf16"}, {"bias", false}};
  StepInstanceOptions hopper;
  hopper.skinny_fusion = {{"silu_mul", true}};
  auto fusedPrefill = [](const Result<std::vector<StepInstance>>& list) -> const StepInstance* {
    for (const StepInstance& inst : *list)
      if (inst.role == InstanceRole::kFusedPrefill) return &inst;
    return nullptr;
  };
  auto list = stepInstances("gemm", gate_up, "gate_up_l0", hopper);
  ASSERT_TRUE(list.ok()) << list.error().message;
  const StepInstance* swiglu = fusedPrefill(list);
  ASSERT_NE(swiglu, nullptr);
  EXPECT_EQ(swiglu->kind, "gemm_swiglu");
  EXPECT_EQ(swiglu->params, (json{{"hidden", 4096}, {"ffn", 14336}}));
  EXPECT_STREQ(instanceRoleName(swiglu->role), "fused_prefill");
  auto generated = instanceSource(swiglu->kind, swiglu->params, swiglu->name);
  ASSERT_TRUE(generated.ok()) << generated.error().message;
  EXPECT_EQ(generated->arch, "sm_90a");
  EXPECT_NE(generated->source.find("(const __grid_constant__ kiln::kernels::GemmSwiGluParams p)"), std::string::npos)
      << generated->source;

  StepInstanceOptions pre_hopper = hopper, off = hopper;
  pre_hopper.wgmma = false;
  off.fused_prefill = false;
  EXPECT_EQ(fusedPrefill(stepInstances("gemm", gate_up, "gate_up_l0", pre_hopper)), nullptr);
  EXPECT_EQ(fusedPrefill(stepInstances("gemm", gate_up, "gate_up_l0", off)), nullptr);
  json odd = gate_up, biased = gate_up;
  odd["n"] = 2 * 200;  // 200 outputs: not a multiple of the kernel's 128
  biased["bias"] = true;
  EXPECT_EQ(fusedPrefill(stepInstances("gemm", odd, "gate_up_l0", hopper)), nullptr);
  EXPECT_EQ(fusedPrefill(stepInstances("gemm", biased, "gate_up_l0", hopper)), nullptr);
  StepInstanceOptions unfused;
  EXPECT_EQ(fusedPrefill(stepInstances("gemm", gate_up, "gate_up_l0", unfused)), nullptr);
  // The template's own refusals name the param.
  auto bad = instanceSource("gemm_swiglu", json{{"hidden", 4096}, {"ffn", 200}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "gemm_swiglu: param 'ffn' is 200, expected a positive multiple of 128");
}

// An f32 plan's steps: typed instances under names of their own, no gemm
// instance (cuBLASLt), CUDA-core attention with its split mode and combine.
TEST(StepInstances, F32PlanGetsTypedInstancesAndNoGemmKernel) {
  StepInstanceOptions f32;
  f32.activation_type = "f32";
  f32.skinny_fusion = {{"silu_mul", true}};  // ignored: the skinny kernels are bf16's
  auto gemm = stepInstances("gemm", {{"n", 64}, {"k", 64}, {"weight_type", "bf16"}, {"bias", false}}, "gemm_a", f32);
  ASSERT_TRUE(gemm.ok()) << gemm.error().message;
  EXPECT_TRUE(gemm->empty());

  f32.skinny_fusion = nullptr;
  const json norm{{"hidden", 64}, {"epsilon", 1e-5}};
  auto rms = stepInstances("rms_norm", norm, "rms_norm_epsilon1em05_hidden64", f32);
  ASSERT_TRUE(rms.ok());
  ASSERT_EQ(rms->size(), 1u);
  EXPECT_EQ((*rms)[0].name, "rms_norm_epsilon1em05_hidden64_out_typef32_x_typef32");
  EXPECT_EQ((*rms)[0].params, withActivationTypes("rms_norm", norm, "f32"));
  auto bf16_rms = stepInstances("rms_norm", norm, "rms_norm_epsilon1em05_hidden64");
  EXPECT_EQ((*bf16_rms)[0].name, "rms_norm_epsilon1em05_hidden64") << "a bf16 plan keeps the manifest's name";

  const json attention{{"heads", 32}, {"kv_heads", 8}, {"head_dim", 128}, {"page_size", 16},
                       {"scale", 0.08838834764831845}, {"kv_type", "f32"}, {"tree_mask", false}};
  auto list = stepInstances("paged_attention", attention, "attn_l0", f32);
  ASSERT_TRUE(list.ok()) << list.error().message;
  ASSERT_EQ(list->size(), 3u);
  const std::vector<std::pair<InstanceRole, std::string>> want = {{InstanceRole::kStep, "paged_attention"},
                                                                  {InstanceRole::kDecode, "paged_attention_split"},
                                                                  {InstanceRole::kCombine, "attention_combine"}};
  for (size_t i = 0; i < want.size(); ++i) {
    const StepInstance& inst = (*list)[i];
    EXPECT_EQ(inst.role, want[i].first) << i;
    EXPECT_EQ(inst.kind, want[i].second) << i;
    EXPECT_EQ(inst.params.value("out_type", ""), "f32") << inst.kind;
    EXPECT_EQ(inst.name, instanceName(inst.kind, inst.params));
    auto generated = instanceSource(inst.kind, inst.params, inst.name);
    ASSERT_TRUE(generated.ok()) << generated.error().message;
    EXPECT_NE(generated->source.find("using Out = float;"), std::string::npos) << generated->source;
  }
  StepInstanceOptions f16_options;
  f16_options.activation_type = "f16";
  auto f16 = stepInstances("rms_norm", norm, "n", f16_options);
  ASSERT_FALSE(f16.ok());
  EXPECT_EQ(f16.error().message, "rms_norm: activation type 'f16' has no CUDA kernels (bf16 or f32)");
}

}  // namespace
}  // namespace kiln::cuda_codegen
