#include "codegen/cuda/activation_types.h"
#include "codegen/cuda/instance_source.h"
#include "codegen/cuda/kernel_selection.h"
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
  auto quant = instanceSource("gemm", json{{"n", 960}, {"k", 576}, {"weight_type", "q5_1"}, {"bias", false}});
  ASSERT_FALSE(quant.ok());
  EXPECT_NE(quant.error().message.find("q5_1"), std::string::npos);
  auto partial = instanceSource("gemm", json{{"n", 960}, {"k", 40}, {"weight_type", "q4_1"}, {"bias", false}});
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.error().message.find("whole blocks"), std::string::npos) << partial.error().message;
  auto fused = instanceSource("gemm", json{{"n", 960}, {"k", 576}, {"weight_type", "q4_1"}, {"bias", false},
                                           {"silu_mul", true}});
  ASSERT_FALSE(fused.ok());
  EXPECT_NE(fused.error().message.find("plain epilogue"), std::string::npos) << fused.error().message;
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

// int8 and fp8 e4m3 pools (a scale per token and kv head, kv_quant.cuh):
// the append and the CUDA-core attention kernels take their code types, the
// decode kernel its scaled tiling; the tensor-core kernels and the gemm's
// rope epilogue refuse them, and other types are named in the error.
TEST(InstanceSource, ScaledKvPoolsTakeTheirCodeTypes) {
  json attention{{"heads", 32}, {"kv_heads", 8}, {"head_dim", 128}, {"page_size", 16},
                 {"scale", 0.08838834764831845}, {"kv_type", "int8"}, {"tree_mask", false}};
  auto decode = instanceSource("decode_attention", attention, "dec_int8");
  ASSERT_TRUE(decode.ok()) << decode.error().message;
  for (const char* line : {"using Kv = kiln::kernels::KvInt8;", "kiln::kernels::decode_attention<Config>(p);",
                           "kChunks = 1;", "kKeys = 4;", "kStages = 2;"})
    EXPECT_NE(decode->source.find(line), std::string::npos) << line << "\n" << decode->source;
  EXPECT_EQ(decode->launch.grid, "[N, kv_heads=8, splits=num_splits], static smem 40960 bytes, 64 keys per tile");
  json fp8 = attention;
  fp8["kv_type"] = "fp8e4m3";
  for (const char* kind : {"paged_attention", "paged_attention_split", "decode_attention"}) {
    auto inst = instanceSource(kind, fp8, "x");
    ASSERT_TRUE(inst.ok()) << kind << ": " << inst.error().message;
    EXPECT_NE(inst->source.find("using Kv = kiln::kernels::KvE4M3;"), std::string::npos) << inst->source;
  }
  json keys2 = attention;
  keys2["keys"] = 2;
  auto bad = instanceSource("decode_attention", keys2);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "decode_attention: param 'keys' is 2; int8 pools take 4 (a scale chunk's keys)");
  json mma = attention;
  mma["mma"] = true;
  EXPECT_FALSE(instanceSource("decode_attention", mma).ok());
  json group16 = attention;
  group16["kv_heads"] = 2;
  auto wide = instanceSource("decode_attention", group16);
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.error().message.find("GQA group 16 over int8 pools puts 8 heads on a thread"), std::string::npos)
      << wide.error().message;
  EXPECT_TRUE(instanceSource("paged_attention_split", group16).ok());
  auto flash = instanceSource("flash_attention", attention);
  ASSERT_FALSE(flash.ok());
  EXPECT_NE(flash.error().message.find("bf16 pools only"), std::string::npos) << flash.error().message;
  json q4 = attention;
  q4["kv_type"] = "q4_0";
  auto unknown = instanceSource("paged_attention", q4);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().message,
            "paged_attention: kv_type 'q4_0' has no CUDA kernel (bf16, f32, int8 or fp8e4m3 pools)");

  json rope{{"heads", 32}, {"kv_heads", 8}, {"head_dim", 128}, {"page_size", 16}, {"merged_qkv", true},
            {"kv_type", "int8"}, {"rope_theta", 500000.0}, {"rope_style", "half"}, {"rope_scaling", "none"},
            {"rope_factor", 1.0}, {"rope_low_freq_factor", 1.0}, {"rope_high_freq_factor", 4.0},
            {"rope_original_max_position", 8192}};
  auto append = instanceSource("rope_kv_append", rope, "rope_int8");
  ASSERT_TRUE(append.ok()) << append.error().message;
  EXPECT_NE(append->source.find("using Kv = kiln::kernels::KvInt8;"), std::string::npos) << append->source;
  json gemm = rope;
  gemm.update({{"n", 6144}, {"k", 4096}, {"weight_type", "bf16"}, {"bias", false}, {"rope_kv_append", true}});
  auto fused = instanceSource("gemm", gemm);
  ASSERT_FALSE(fused.ok());
  EXPECT_NE(fused.error().message.find("int8/fp8 pools take rope_kv_append's own kernel"), std::string::npos)
      << fused.error().message;
}

TEST(WriteInstanceSources, WritesOnlyChangedFilesAndListsUnsupported) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("kiln_codegen_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Two steps of one instance, a weight type with no CUDA kernel, an add.
  const json manifest = json::parse(R"({
    "format": "kiln-artifact", "version": 2,
    "options": {"target": "sm_90a"},
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
         "args": [{"value": 0}, {"weight": 0}], "results": [1],
         "variants": [{"role": "step", "rows": [1, -1], "kind": "rms_norm",
                       "params": {"hidden": 64, "epsilon": 1e-6}, "instance": "norm_a"}]},
        {"kind": "rms_norm", "instance": "norm_a", "params": {"hidden": 64, "epsilon": 1e-6},
         "args": [{"value": 1}, {"weight": 0}], "results": [2],
         "variants": [{"role": "step", "rows": [1, -1], "kind": "rms_norm",
                       "params": {"hidden": 64, "epsilon": 1e-6}, "instance": "norm_a"}]},
        {"kind": "gemm", "instance": "gemm_q", "params": {"n": 64, "k": 64, "weight_type": "q4_1", "bias": false},
         "args": [{"value": 2}, {"weight": 1}], "results": [3],
         "variants": [{"role": "skinny", "rows": [1, 8], "kind": "gemm",
                       "params": {"n": 64, "k": 64, "weight_type": "q5_1", "bias": false}, "instance": "gemm_q"},
                      {"role": "cublaslt", "rows": [9, -1]}]},
        {"kind": "add", "instance": "add_64", "params": {"width": 64},
         "args": [{"value": 3}, {"value": 2}], "results": [0],
         "variants": [{"role": "step", "rows": [1, -1], "kind": "add", "params": {"width": 64},
                       "instance": "add_64"}]}],
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

TEST(InstanceSource, GemmRowCountsStreamingAndNormFold) {
  auto three = instanceSource("gemm", {{"n", 64}, {"k", 64}, {"weight_type", "bf16"}, {"bias", false}, {"gemv_max_rows", 3}});
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.error().message.find("expected 1 or 8"), std::string::npos) << three.error().message;

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

}  // namespace
}  // namespace kiln::cuda_codegen
