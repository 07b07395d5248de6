#include "runtime/artifact/manifest.h"
#include "runtime/artifact/step_params_json.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kiln {
namespace {

using json = nlohmann::json;

// A small valid manifest: embedding -> rms_norm -> gemm (logits) over a
// concat_rows-prepared head, with a view and a pool-free plan.
json validManifest() {
  return json::parse(R"({
    "format": "kiln-artifact", "version": 2,
    "model": {"source": "/models/tiny.gguf", "source_format": "gguf",
              "source_size": 1000, "source_mtime": 1738911720,
              "config": {"architecture": "llama", "hidden_size": 32, "num_layers": 1,
                         "vocab_size": 8}},
    "options": {"quant_weights": "none", "page_size": 16, "target": "sm_90a"},
    "activation_type": "f32", "world_size": 1, "rank": 0,
    "weights": [
      {"id": 0, "name": "token_embd.weight", "type": "q8_0", "shape": [8, 32],
       "source": "token_embd.weight"},
      {"id": 1, "name": "output_norm.weight", "type": "f32", "shape": [32],
       "source": "output_norm.weight"},
      {"id": 3, "name": "head.a", "type": "f32", "shape": [4, 32], "source": "head.a"},
      {"id": 4, "name": "head.b", "type": "f32", "shape": [4, 32], "source": "head.b"},
      {"id": 2, "name": "head.a+head.b", "type": "f32", "shape": [8, 32],
       "prepare": {"op": "concat_rows", "inputs": [3, 4]}}
    ],
    "kv_cache": {"layers": 1, "page_size": 16, "kv_heads": 2, "head_dim": 16, "type": "f32"},
    "entries": {"forward": {
      "inputs": [{"name": "tokens", "type": "i32", "shape": [-1]},
                 {"name": "query_start", "type": "i32", "shape": [-1]}],
      "values": [
        {"id": 0, "type": "f32", "shape": [-1, 32], "rows": "tokens", "row_bytes": 128, "offset": 0},
        {"id": 1, "type": "f32", "shape": [-1, 32], "rows": "tokens", "row_bytes": 128, "offset": 128},
        {"id": 2, "type": "f32", "shape": [-1, 32], "rows": "tokens", "row_bytes": 128, "view_of": 1},
        {"id": 3, "type": "f32", "shape": [-1, 8], "rows": "tokens", "row_bytes": 32, "offset": 0}
      ],
      "arena": {"bytes_per_token": 256},
      "steps": [
        {"kind": "embedding", "instance": "embedding_hidden32",
         "params": {"hidden": 32, "table_type": "q8_0"},
         "args": [{"input": "tokens"}, {"weight": 0}], "results": [0]},
        {"kind": "rms_norm", "params": {"hidden": 32, "epsilon": 1e-5},
         "args": [{"value": 0}, {"weight": 1}], "results": [1],
         "variants": [{"role": "step", "rows": [1, -1], "kind": "rms_norm",
                       "params": {"hidden": 32, "epsilon": 1e-5}, "instance": "rms_norm_h32"}]},
        {"kind": "gemm", "params": {"n": 8, "k": 32, "weight_type": "f32", "bias": false,
                                    "role": "logits"},
         "args": [{"value": 2}, {"weight": 2}], "results": [3]}
      ],
      "outputs": [{"name": "logits", "value": 3}]
    }}
  })");
}

std::string parseError(const json& manifest) {
  auto m = Manifest::parse(manifest.dump(), "manifest.json");
  return m.ok() ? "(parsed)" : m.error().message;
}

TEST(ManifestTest, ParsesAValidManifest) {
  auto m = Manifest::parse(validManifest().dump(), "manifest.json");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->model.source, "/models/tiny.gguf");
  EXPECT_EQ(m->model.source_size, 1000u);
  EXPECT_EQ(m->model.vocab_size, 8);
  EXPECT_EQ(m->options.at("page_size"), "16");
  EXPECT_EQ(m->options.at("quant_weights"), "none");
  ASSERT_EQ(m->weights.size(), 5u);
  EXPECT_EQ(m->weights[2].id, 2);  // sorted by id
  ASSERT_TRUE(m->findWeight(2)->prepare.has_value());
  EXPECT_EQ(m->findWeight(2)->prepare->inputs, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(m->kv_cache.head_dim, 16);
  const Entry* forward = m->findEntry("forward");
  ASSERT_NE(forward, nullptr);
  EXPECT_EQ(forward->bytes_per_token, 256);
  EXPECT_EQ(forward->findValue(2)->view_of, 1);
  ASSERT_EQ(forward->steps.size(), 3u);
  const Step& gemm = forward->steps[2];
  EXPECT_EQ(gemm.kind, StepKind::kGemm);
  EXPECT_EQ(gemm.path, "manifest.json: entries.forward.steps[2]");
  EXPECT_EQ(gemm.as<GemmParams>().n, 8);
  EXPECT_EQ(gemm.as<GemmParams>().role, "logits");
  EXPECT_FALSE(gemm.as<GemmParams>().bias);
  EXPECT_FALSE(gemm.as<GemmParams>().scales) << "absent: no scales";
  EXPECT_DOUBLE_EQ(forward->steps[1].as<RmsNormParams>().epsilon, 1e-5);
  EXPECT_EQ(forward->steps[1].as<RmsNormParams>().weight_type, "") << "absent: f32";
  EXPECT_EQ(forward->steps[0].args[0].kind, StepArg::Kind::kInput);
  EXPECT_EQ(forward->outputs[0].value, 3);
}

TEST(ManifestTest, KernelVariantsAndTarget) {
  auto m = Manifest::parse(validManifest().dump(), "manifest.json");
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->target, "sm_90a");
  const Step& norm = m->findEntry("forward")->steps[1];
  ASSERT_EQ(norm.variants.size(), 1u);
  EXPECT_EQ(norm.variants[0].role, VariantRole::kStep);
  EXPECT_EQ(norm.variants[0].rows.min, 1);
  EXPECT_EQ(norm.variants[0].rows.max, RowRange::kUnbounded);
  EXPECT_EQ(norm.variants[0].instance, "rms_norm_h32");
  EXPECT_TRUE(m->findEntry("forward")->steps[2].variants.empty());
  json no_target = validManifest();
  no_target["options"].erase("target");
  EXPECT_EQ(Manifest::parse(no_target.dump(), "manifest.json")->target, "cpu");

  auto variantError = [](const std::string& variant) {
    json bad = validManifest();
    bad["entries"]["forward"]["steps"][1]["variants"][0] = json::parse(variant);
    return parseError(bad);
  };
  const std::string at = "manifest.json: entries.forward.steps[1].variants[0]";
  EXPECT_EQ(variantError(R"({"role": "fused", "rows": [1, 8]})"),
            at + ".role: 'fused' is not a variant of a rms_norm step (expected one of step)");
  EXPECT_EQ(variantError(R"({"role": "step", "rows": [4, 2], "kind": "rms_norm", "params": {}, "instance": "x"})"),
            at + ".rows: [4, 2] is not a range of row counts (min >= 1, max >= min or -1)");
  EXPECT_EQ(variantError(R"({"role": "step", "rows": [1, -1], "kind": "rms_norm", "params": {}})"),
            at + ": a 'step' variant runs a kernel and needs 'instance'");
  EXPECT_EQ(variantError(R"({"role": "step", "rows": [1, -1], "needs": ["warp_drive"], "kind": "rms_norm",
                            "params": {}, "instance": "x"})"),
            at + ".needs[0]: \"warp_drive\" is not a feature (stream_gemv, fold_norms, residual_epilogue, "
                 "fused_swiglu, flash_attention)");
  EXPECT_EQ(variantError(R"({"role": "step", "rows": [1, -1], "kind": "rms_norm", "params": {},
                            "instance": "x; rm -rf"})"),
            at + ".instance: 'x; rm -rf' is not a kernel symbol (letters, digits and _)");
}

TEST(ManifestTest, ParamErrorsNameTheStepAndParam) {
  json missing = validManifest();
  missing["entries"]["forward"]["steps"][1]["params"].erase("epsilon");
  EXPECT_EQ(parseError(missing),
            "manifest.json: entries.forward.steps[1].params: missing param 'epsilon' (expected a number)");
  json mistyped = validManifest();
  mistyped["entries"]["forward"]["steps"][2]["params"]["bias"] = 0;
  EXPECT_EQ(parseError(mistyped),
            "manifest.json: entries.forward.steps[2].params.bias: expected a boolean, got an integer");
  json unknown = validManifest();
  unknown["entries"]["forward"]["steps"][1]["params"]["width"] = 32;
  EXPECT_EQ(parseError(unknown),
            "manifest.json: entries.forward.steps[1].params.width: rms_norm takes no param 'width' (its params: "
            "epsilon, hidden, out_type, weight_type, x_type)");
  json negative = validManifest();
  negative["entries"]["forward"]["steps"][2]["params"]["n"] = -8;
  EXPECT_EQ(parseError(negative),
            "manifest.json: entries.forward.steps[2].params.n: expected a positive size, got -8");
  json bad_type = validManifest();
  bad_type["entries"]["forward"]["steps"][1]["params"]["out_type"] = "q4_0";
  EXPECT_EQ(parseError(bad_type),
            "manifest.json: entries.forward.steps[1].params.out_type: expected f32, bf16 or f16, got 'q4_0'");
  json unscaled = validManifest();
  unscaled["entries"]["forward"]["steps"][2]["params"]["weight_type"] = "int8";
  EXPECT_EQ(parseError(unscaled),
            "manifest.json: entries.forward.steps[2].params.scales: weight_type int8 needs a scales operand");
  json bad_role = validManifest();
  bad_role["entries"]["forward"]["steps"][2]["params"]["role"] = "head";
  EXPECT_EQ(parseError(bad_role),
            "manifest.json: entries.forward.steps[2].params.role: expected one of logits, got 'head'");
}

// The heads of an attention step: whole GQA groups, and the pool's layout.
TEST(StepParamsTest, AttentionHeadsChecked) {
  ParamMap values{{"heads", int64_t(32)},   {"kv_heads", int64_t(8)},  {"head_dim", int64_t(128)},
                  {"page_size", int64_t(16)}, {"kv_type", std::string("bf16")}, {"scale", 0.088}};
  auto good = parseStepParams(StepKind::kPagedAttention, values, "p");
  ASSERT_TRUE(good.ok()) << good.error().message;
  EXPECT_EQ(attentionHeads(*good)->heads, 32);
  EXPECT_FALSE(std::get<PagedAttentionParams>(*good).tree_mask) << "absent: no tree mask";
  values["heads"] = int64_t(30);
  EXPECT_EQ(parseStepParams(StepKind::kPagedAttention, values, "p").error().message,
            "p.heads: 30 is not a multiple of kv_heads 8");
  values["heads"] = int64_t(32);
  values.erase("kv_heads");
  EXPECT_EQ(parseStepParams(StepKind::kPagedAttention, values, "p").error().message,
            "p: missing param 'kv_heads' (expected an integer)");
}

// Mixture of experts: top_k within the experts; moe_router's router GEMM
// inside (hidden) comes with its weight's type, and written back the same.
TEST(StepParamsTest, MoeParamsChecked) {
  ParamMap router{{"experts", int64_t(8)}, {"top_k", int64_t(2)}, {"normalize", true},
                  {"hidden", int64_t(4096)}, {"weight_type", std::string("bf16")}};
  auto good = parseStepParams(StepKind::kMoeRouter, router, "p");
  ASSERT_TRUE(good.ok()) << good.error().message;
  EXPECT_EQ(stepParamsMap(*good), router);
  router["top_k"] = int64_t(9);
  EXPECT_EQ(parseStepParams(StepKind::kMoeRouter, router, "p").error().message, "p.top_k: is 9, more than the 8 experts");
  router["top_k"] = int64_t(2);
  router.erase("weight_type");
  EXPECT_EQ(parseStepParams(StepKind::kMoeRouter, router, "p").error().message,
            "p.weight_type: is '' with hidden 4096: the router weight's type comes with it");
  ParamMap experts{{"hidden", int64_t(64)}, {"ffn", int64_t(96)}, {"experts", int64_t(4)}, {"top_k", int64_t(5)},
                   {"weight_type", std::string("f32")}};
  EXPECT_EQ(parseStepParams(StepKind::kMoeFfn, experts, "p").error().message, "p.top_k: is 5, more than the 4 experts");
  experts["top_k"] = int64_t(2);
  experts["weight_type"] = std::string("q9_9");
  EXPECT_EQ(parseStepParams(StepKind::kMoeFfn, experts, "p").error().message, "p.weight_type: unknown element type 'q9_9'");
}

// int8 and fp8 pools carry a scale per (token slot, kv head) and say so;
// the float pools carry none; any other type is unknown.
TEST(ManifestTest, KvCacheTypeAndScales) {
  json m = validManifest();
  m["kv_cache"]["type"] = "int8";
  m["kv_cache"]["scales"] = "token_head";
  auto ok = Manifest::parse(m.dump(), "manifest.json");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->kv_cache.type, "int8");
  EXPECT_EQ(ok->kv_cache.scales, "token_head");
  m["kv_cache"]["type"] = "fp8e4m3";
  EXPECT_EQ(parseError(m), "(parsed)");
  m["kv_cache"].erase("scales");
  EXPECT_EQ(parseError(m), "manifest.json: kv_cache.scales: fp8e4m3 pools need \"token_head\" scales (an f32 per "
                           "token slot and kv head), got ''");
  m["kv_cache"]["scales"] = "token";
  EXPECT_EQ(parseError(m), "manifest.json: kv_cache.scales: fp8e4m3 pools need \"token_head\" scales (an f32 per "
                           "token slot and kv head), got 'token'");
  m["kv_cache"]["type"] = "bf16";
  m["kv_cache"]["scales"] = "token_head";
  EXPECT_EQ(parseError(m), "manifest.json: kv_cache.scales: bf16 pools take no scales, got 'token_head'");
  m["kv_cache"].erase("scales");
  m["kv_cache"]["type"] = "i8";
  EXPECT_EQ(parseError(m), "manifest.json: kv_cache.type: unknown KV cache type 'i8', expected one of: f32, f16, "
                           "bf16, int8, fp8e4m3");
}

TEST(ManifestTest, AttentionHeadsMatchTheKvCache) {
  json m = validManifest();
  json& forward = m["entries"]["forward"];
  forward["inputs"].push_back({{"name", "block_tables"}, {"type", "i32"}, {"shape", {-1, -1}}});
  forward["inputs"].push_back({{"name", "kv_lens"}, {"type", "i32"}, {"shape", {-1}}});
  forward["steps"].push_back(json::parse(R"({"kind": "paged_attention",
      "params": {"heads": 2, "kv_heads": 2, "head_dim": 16, "page_size": 16, "kv_type": "f32", "scale": 0.25},
      "args": [{"value": 1}, {"pool": {"layer": 0, "role": "k"}}, {"pool": {"layer": 0, "role": "v"}},
               {"input": "block_tables"}, {"input": "query_start"}, {"input": "kv_lens"}],
      "results": [0]})"));
  auto ok = Manifest::parse(m.dump(), "manifest.json");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  forward["steps"][3]["params"]["page_size"] = 32;
  EXPECT_EQ(parseError(m), "manifest.json: entries.forward.steps[3].params.page_size: 32 is not kv_cache.page_size 16");
  forward["steps"][3]["params"]["page_size"] = 16;
  forward["steps"][3]["params"]["kv_type"] = "bf16";
  EXPECT_EQ(parseError(m), "manifest.json: entries.forward.steps[3].params.kv_type: bf16 is not kv_cache.type f32");
}

// Params the parser takes are written back as they were read: required
// ones always, optional ones only when set.
TEST(ManifestTest, StepParamsRoundTrip) {
  auto m = Manifest::parse(validManifest().dump(), "manifest.json");
  ASSERT_TRUE(m.ok()) << m.error().message;
  const json original = validManifest()["entries"]["forward"]["steps"];
  const auto& steps = m->findEntry("forward")->steps;
  for (size_t i = 0; i < steps.size(); ++i) {
    json written = toJson(steps[i].params);
    json expected = original[i]["params"];
    if (steps[i].kind == StepKind::kGemm) expected["scales"] = false;  // defaulted, always written
    EXPECT_EQ(written, expected) << i;
  }
}

TEST(ManifestTest, UnknownWeightId) {
  json m = validManifest();
  m["entries"]["forward"]["steps"][1]["args"][1]["weight"] = 999;
  EXPECT_EQ(parseError(m), "manifest.json: entries.forward.steps[1].args[1]: unknown weight id 999");
}

TEST(ManifestTest, UnknownStepKindListsTheSupportedOnes) {
  json m = validManifest();
  m["entries"]["forward"]["steps"][0]["kind"] = "conv2d";
  EXPECT_EQ(parseError(m),
            "manifest.json: entries.forward.steps[0].kind: unknown step kind 'conv2d' (supported: "
            "embedding, rms_norm, residual_rms_norm, gemm, rope_kv_append, paged_attention, "
            "silu_mul, add, mul, silu, split, gather_last_tokens, moe_router, moe_ffn, tree_positions, tree_mask, "
            "accept, ssm_conv1d, selective_scan, ssd_scan, ssm_gated_norm, kv_append, relu_squared, "
            "all_reduce, send, recv)");
}

TEST(ManifestTest, WrongArgumentKinds) {
  json m = validManifest();
  m["entries"]["forward"]["steps"][1]["args"] = json::parse(R"([{"value": 0}])");
  EXPECT_EQ(parseError(m),
            "manifest.json: entries.forward.steps[1].args: rms_norm takes (value, weight), got "
            "(value)");
  m = validManifest();
  m["entries"]["forward"]["steps"][2]["args"][1] = json::parse(R"({"input": "tokens"})");
  EXPECT_EQ(parseError(m),
            "manifest.json: entries.forward.steps[2].args: gemm takes (value, weight) or (value, "
            "weight, weight), got (value, input)");
  m = validManifest();
  m["entries"]["forward"]["steps"][0]["args"][0] = json::parse(R"({"input": "slots"})");
  EXPECT_EQ(parseError(m), "manifest.json: entries.forward.steps[0].args[0]: unknown input 'slots'");
  m = validManifest();
  m["entries"]["forward"]["steps"][0]["args"][0] = json::parse(R"({"tensor": 1})");
  EXPECT_EQ(parseError(m),
            "manifest.json: entries.forward.steps[0].args[0]: expected an object with one of "
            "'input', 'weight', 'value', 'pool', 'state'");
}

TEST(ManifestTest, UnknownValueIdInResultsAndOutputs) {
  json m = validManifest();
  m["entries"]["forward"]["steps"][0]["results"] = json::parse("[42]");
  EXPECT_EQ(parseError(m), "manifest.json: entries.forward.steps[0].results[0]: unknown value id 42");
  m = validManifest();
  m["entries"]["forward"]["outputs"][0]["value"] = 9;
  EXPECT_EQ(parseError(m), "manifest.json: entries.forward.outputs[0].value: unknown value id 9");
  m = validManifest();
  m["entries"]["forward"]["steps"][1]["results"] = json::parse("[]");
  EXPECT_EQ(parseError(m), "manifest.json: entries.forward.steps[1].results: rms_norm gives 1 "
                           "result, got 0");
}

// A state-space model: no attention layers (kv_cache of 0 layers), a
// state_cache whose bytes follow its shapes, and steps whose state pool
// arguments name its layers and roles.
TEST(ManifestTest, StateCacheAndStateArguments) {
  json m = validManifest();
  m["kv_cache"] = json::parse(R"({"layers": 0, "page_size": 16, "kv_heads": 0, "head_dim": 0, "type": "f32"})");
  EXPECT_EQ(parseError(m), "manifest.json: kv_cache.layers: is 0 and there is no state_cache: the model carries no "
                           "state");
  m["state_cache"] = json::parse(R"({"conv_type": "f32", "layers": [
      {"conv": [3, 32], "conv_bytes": 384, "ssm": [4, 8, 16], "ssm_bytes": 2048}]})");
  m["entries"]["forward"]["inputs"].push_back(json::parse(R"({"name": "state_slots", "type": "i32", "shape": [-1]})"));
  m["entries"]["forward"]["steps"].insert(
      m["entries"]["forward"]["steps"].begin() + 1,
      json::parse(R"({"kind": "ssm_conv1d", "params": {"channels": 32, "width": 4, "silu": true},
                      "args": [{"value": 0}, {"state": {"layer": 0, "role": "conv"}}, {"weight": 3},
                               {"input": "query_start"}, {"input": "state_slots"}], "results": [1]})"));
  auto parsed = Manifest::parse(m.dump(), "manifest.json");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->kv_cache.layers, 0);
  ASSERT_EQ(parsed->state_cache.layers.size(), 1u);
  EXPECT_EQ(parsed->state_cache.slotBytes(), 384 + 2048);
  const Step& conv = parsed->findEntry("forward")->steps[1];
  EXPECT_EQ(conv.args[1].kind, StepArg::Kind::kState);
  EXPECT_EQ(conv.args[1].state_role, StateRole::kConv);
  EXPECT_EQ(conv.as<SsmConv1dParams>().width, 4);

  json bad = m;
  bad["state_cache"]["layers"][0]["ssm_bytes"] = 2000;
  EXPECT_EQ(parseError(bad), "manifest.json: state_cache.layers[0].ssm_bytes: 2000 is not 512 f32 elements "
                             "(2048 bytes)");
  bad = m;
  bad["entries"]["forward"]["steps"][1]["args"][1] = json::parse(R"({"state": {"layer": 1, "role": "conv"}})");
  EXPECT_EQ(parseError(bad), "manifest.json: entries.forward.steps[1].args[1].state.layer: layer 1 is out of "
                             "range (state_cache has 1 layers)");
  bad["entries"]["forward"]["steps"][1]["args"][1] = json::parse(R"({"state": {"layer": 0, "role": "k"}})");
  EXPECT_EQ(parseError(bad), "manifest.json: entries.forward.steps[1].args[1].state.role: expected \"conv\" or "
                             "\"ssm\", got \"k\"");
  bad["entries"]["forward"]["steps"][1]["args"][1] = json::parse(R"({"pool": {"layer": 0, "role": "k"}})");
  EXPECT_EQ(parseError(bad), "manifest.json: entries.forward.steps[1].args[1].pool.layer: layer 0 is out of "
                             "range (kv_cache.layers is 0)");
}

TEST(ManifestTest, PoolArguments) {
  json m = validManifest();
  m["entries"]["forward"]["steps"][2]["args"][0] = json::parse(R"({"pool": {"layer": 3, "role": "k"}})");
  EXPECT_EQ(parseError(m), "manifest.json: entries.forward.steps[2].args[0].pool.layer: layer 3 is "
                           "out of range (kv_cache.layers is 1)");
  m["entries"]["forward"]["steps"][2]["args"][0] = json::parse(R"({"pool": {"layer": 0, "role": "q"}})");
  EXPECT_EQ(parseError(m), "manifest.json: entries.forward.steps[2].args[0].pool.role: expected "
                           "\"k\" or \"v\", got \"q\"");
}

TEST(ManifestTest, SourceFiles) {
  json m = validManifest();
  m["model"]["source_files"] = json::parse(
      R"([{"file": "tiny.gguf", "size": 1000, "mtime": 1738911720, "sampled_hash": "0123456789abcdef"}])");
  auto parsed = Manifest::parse(m.dump(), "manifest.json");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  ASSERT_EQ(parsed->model.source_files.size(), 1u);
  EXPECT_EQ(parsed->model.source_files[0].file, "tiny.gguf");
  EXPECT_EQ(parsed->model.source_files[0].size, 1000u);
  EXPECT_EQ(parsed->model.source_files[0].sampled_hash, "0123456789abcdef");
  m["model"]["source_files"][0]["sampled_hash"] = "XYZ";
  EXPECT_EQ(parseError(m), "manifest.json: model.source_files[0].sampled_hash: expected 16 lower-case hex "
                           "digits, got \"XYZ\"");
  m["model"]["source_files"][0].erase("size");
  EXPECT_EQ(parseError(m), "manifest.json: model.source_files[0]: missing field 'size' (expected an integer)");
  m["model"]["source_files"] = json::array({7});
  EXPECT_EQ(parseError(m), "manifest.json: model.source_files[0]: expected an object, got number");
}

TEST(ManifestTest, HeaderErrors) {
  json m = validManifest();
  m["version"] = 1;
  EXPECT_EQ(parseError(m), "manifest.json: version: unsupported version 1 (this runtime reads "
                           "version 2)");
  m = validManifest();
  m["format"] = "gguf";
  EXPECT_EQ(parseError(m), "manifest.json: format: expected \"kiln-artifact\", got \"gguf\"");
  m = validManifest();
  m["model"]["source_size"] = "big";
  EXPECT_EQ(parseError(m), "manifest.json: model.source_size: expected an integer, got string");
  m = validManifest();
  m["kv_cache"].erase("page_size");
  EXPECT_EQ(parseError(m),
            "manifest.json: kv_cache: missing field 'page_size' (expected an integer)");
  m = validManifest();
  m.erase("entries");
  EXPECT_EQ(parseError(m), "manifest.json: <root>: missing field 'entries' (expected an object)");
  m = validManifest();
  m["entries"]["verify"] = m["entries"]["forward"];
  m["entries"].erase("forward");
  EXPECT_EQ(parseError(m), "manifest.json: entries: missing entry 'forward'");
  m = validManifest();
  m["model"]["source_format"] = "onnx";
  EXPECT_EQ(parseError(m), "manifest.json: model.source_format: expected \"gguf\" or "
                           "\"safetensors\", got \"onnx\"");
}

TEST(ManifestTest, WeightErrors) {
  json m = validManifest();
  m["weights"][4]["prepare"]["inputs"][1] = 7;
  EXPECT_EQ(parseError(m), "manifest.json: weights[4].prepare.inputs[1]: unknown weight id 7");
  m = validManifest();
  m["weights"][1]["id"] = 0;
  EXPECT_EQ(parseError(m), "manifest.json: weights[1].id: duplicate weight id 0");
  m = validManifest();
  m["weights"][0]["type"] = "q9_9";
  EXPECT_EQ(parseError(m), "manifest.json: weights[0].type: unknown element type 'q9_9'");
  m = validManifest();
  m["weights"][0]["shape"][0] = -1;
  EXPECT_EQ(parseError(m), "manifest.json: weights[0].shape[0]: expected a dimension >= 0, got -1");
  m = validManifest();
  m["weights"][1]["prepare"] = m["weights"][4]["prepare"];
  EXPECT_EQ(parseError(m), "manifest.json: weights[1]: expected exactly one of 'source' (a "
                           "checkpoint tensor) or 'prepare'");
  m = validManifest();
  m["weights"][4]["prepare"]["op"] = "transpose";
  EXPECT_EQ(parseError(m), "manifest.json: weights[4].prepare.op: unknown prepare op 'transpose' "
                           "(expected concat_rows, quantize, offset, sparsify or slice)");
  // sparsify names its pattern and method, one input.
  m = validManifest();
  json& prep = m["weights"][4]["prepare"];
  prep = {{"op", "sparsify"}, {"inputs", {prep["inputs"][0]}}, {"pattern", "4:8"}, {"method", "magnitude"}};
  EXPECT_EQ(parseError(m), "manifest.json: weights[4].prepare.pattern: '4:8', expected '2:4'");
  m["weights"][4]["prepare"]["pattern"] = "2:4";
  m["weights"][4]["prepare"]["method"] = "wanda";
  EXPECT_EQ(parseError(m), "manifest.json: weights[4].prepare.method: 'wanda', expected 'magnitude' or 'sparsegpt'");
  m["weights"][4]["prepare"].erase("method");
  EXPECT_NE(parseError(m).find("weights[4].prepare"), std::string::npos);
}

TEST(ManifestTest, ValueErrors) {
  json m = validManifest();
  m["entries"]["forward"]["values"][1]["offset"] = 200;
  EXPECT_EQ(parseError(m), "manifest.json: entries.forward.values[1]: offset 200 + row_bytes 128 "
                           "is past the arena's bytes_per_token 256");
  m = validManifest();
  m["entries"]["forward"]["values"][2]["view_of"] = 17;
  EXPECT_EQ(parseError(m), "manifest.json: entries.forward.values[2].view_of: unknown value id 17");
  m = validManifest();
  m["entries"]["forward"]["values"][0]["rows"] = "batch";
  EXPECT_EQ(parseError(m), "manifest.json: entries.forward.values[0].rows: expected \"tokens\", "
                           "\"sequences\" or \"fixed\", got \"batch\"");
  m = validManifest();
  m["entries"]["forward"]["values"][3]["id"] = 0;
  EXPECT_EQ(parseError(m), "manifest.json: entries.forward.values[3].id: duplicate value id 0");
}

TEST(ManifestTest, InvalidJsonAndMissingFile) {
  auto m = Manifest::parse("{\"format\": ", "manifest.json");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().message.rfind("manifest.json: [json.exception.parse_error", 0), 0u)
      << m.error().message;
  auto missing = Manifest::load("/nonexistent/artifact");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message,
            "/nonexistent/artifact: cannot open the artifact manifest (expected "
            "DIR/manifest.json written by kiln-compile -o DIR)");
}


// A multi-rank plan names its shard and stage; a slice preparation and the
// all-reduce step parse.
TEST(ManifestTest, ParallelSection) {
  json m = validManifest();
  m["world_size"] = 4;
  m["rank"] = 3;
  m["parallel"] = {{"tensor_parallel", 2}, {"pipeline_parallel", 2}, {"tp_rank", 1}, {"pp_stage", 1}};
  m["weights"].push_back(json::parse(R"({"id": 5, "name": "head.a[2:4@0]", "type": "f32", "shape": [2, 32],
      "prepare": {"op": "slice", "inputs": [3], "axis": 0, "offset": 2, "size": 2}})"));
  m["entries"]["forward"]["steps"].push_back(json::parse(R"({"kind": "all_reduce",
      "params": {"hidden": 32, "group_size": 2}, "args": [{"value": 1}], "results": [0]})"));
  auto parsed = Manifest::parse(m.dump(), "manifest.json");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->world_size, 4);
  EXPECT_EQ(parsed->rank, 3);
  EXPECT_EQ(parsed->parallel.tensor_parallel, 2);
  EXPECT_EQ(parsed->parallel.pipeline_parallel, 2);
  EXPECT_EQ(parsed->parallel.tp_rank, 1);
  EXPECT_EQ(parsed->parallel.pp_stage, 1);
  const WeightPrepare& slice = *parsed->findWeight(5)->prepare;
  EXPECT_EQ(slice.op, "slice");
  EXPECT_EQ(slice.axis, 0);
  EXPECT_EQ(slice.offset, 2);
  EXPECT_EQ(slice.size, 2);
  const Step& sum = parsed->findEntry("forward")->steps.back();
  EXPECT_EQ(sum.kind, StepKind::kAllReduce);
  EXPECT_EQ(sum.as<AllReduceParams>().group_size, 2);

  // A single-rank plan has the trivial layout.
  auto single = Manifest::parse(validManifest().dump(), "manifest.json");
  ASSERT_TRUE(single.ok()) << single.error().message;
  EXPECT_EQ(single->parallel.tensor_parallel, 1);
  EXPECT_EQ(single->parallel.tp_rank, 0);

  json bad = m;
  bad.erase("parallel");
  EXPECT_EQ(parseError(bad), "manifest.json: parallel: missing: world_size 4 needs the tensor- and "
                             "pipeline-parallel layout");
  bad = m;
  bad["parallel"]["pipeline_parallel"] = 3;
  EXPECT_EQ(parseError(bad), "manifest.json: parallel: tensor_parallel 2 x pipeline_parallel 3 is 6, "
                             "world_size is 4");
  bad = m;
  bad["rank"] = 2;
  EXPECT_EQ(parseError(bad), "manifest.json: parallel: pp_stage 1 x tensor_parallel 2 + tp_rank 1 is 3, "
                             "rank is 2");
}
}  // namespace
}  // namespace kiln
