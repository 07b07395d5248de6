#include "models/formats/model_config.h"

#include <gtest/gtest.h>

#include <cmath>

#include "models/formats/gguf_file.h"
#include "models/formats/testing/gguf_writer.h"
#include "models/formats/testing/model_files.h"
#include "test/source_root.h"

namespace kiln::formats {
namespace {

const std::string kFixtures = checkoutPath("test/models");

// A minimal valid llama config with `extra` spliced into the object.
std::string llamaJson(const std::string& extra = "") {
  return R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "vocab_size": 100, "max_position_embeddings": 256)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

std::string parseError(const std::string& text) {
  auto c = parseHfConfigText(text, "c.json");
  if (c.ok()) return "<parsed>";
  EXPECT_EQ(c.error().message.find('\n'), std::string::npos);
  return c.error().message;
}

TEST(ModelConfigTest, Llama3_8B) {
  const std::string path = kFixtures + "/llama3-8b/config.json";
  auto c = parseHfConfig(path);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->intermediate_size, 14336);
  EXPECT_EQ(c->num_layers, 32);
  EXPECT_EQ(c->num_heads, 32);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->vocab_size, 128256);
  EXPECT_EQ(c->max_position_embeddings, 8192);
  EXPECT_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->rope_scaling.kind, RopeScaling::Kind::kNone);
  EXPECT_EQ(c->rope_style, RopeStyle::kHalf);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->weight_dtype, ElementType::BF16);
  EXPECT_EQ(c->source, path);
}

TEST(ModelConfigTest, Llama32_1B) {
  auto c = parseHfConfig(kFixtures + "/llama3.2-1b/config.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->hidden_size, 2048);
  EXPECT_EQ(c->intermediate_size, 8192);
  EXPECT_EQ(c->num_layers, 16);
  EXPECT_EQ(c->num_heads, 32);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->max_position_embeddings, 131072);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->rope_scaling.kind, RopeScaling::Kind::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_EQ(c->rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c->rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(ropeScalingKindName(c->rope_scaling.kind), "llama3");
}

TEST(ModelConfigTest, DefaultsAndVariants) {
  auto llama = parseHfConfigText(
      R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
          "head_dim": null, "rope_scaling": {"type": "linear", "factor": 2.0}})",
      "c.json");
  ASSERT_TRUE(llama.ok()) << llama.error().message;
  EXPECT_EQ(llama->architecture, "llama");
  EXPECT_EQ(llama->num_kv_heads, 4);  // defaults to num_attention_heads
  EXPECT_EQ(llama->head_dim, 16);
  EXPECT_EQ(llama->max_position_embeddings, 2048);
  EXPECT_EQ(llama->rope_theta, 10000.0);
  EXPECT_EQ(llama->rms_norm_eps, 1e-6);
  EXPECT_EQ(llama->rope_scaling.kind, RopeScaling::Kind::kLinear);
  EXPECT_EQ(llama->rope_scaling.factor, 2.0);

  auto qwen = parseHfConfigText(
      R"({"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
          "vocab_size": 100, "use_sliding_window": false, "sliding_window": 4096,
          "tie_word_embeddings": true, "torch_dtype": "float16"})",
      "q.json");
  ASSERT_TRUE(qwen.ok()) << qwen.error().message;
  EXPECT_TRUE(qwen->attention_bias);
  EXPECT_EQ(qwen->sliding_window, 0);
  EXPECT_TRUE(qwen->tie_word_embeddings);
  EXPECT_EQ(qwen->weight_dtype, ElementType::F16);

  auto mistral = parseHfConfigText(
      R"({"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "vocab_size": 100, "sliding_window": 4096, "rope_parameters":
          {"rope_theta": 1000000.0, "rope_type": "default"}})",
      "m.json");
  ASSERT_TRUE(mistral.ok()) << mistral.error().message;
  EXPECT_EQ(mistral->sliding_window, 4096);
  EXPECT_EQ(mistral->rope_theta, 1000000.0);
  EXPECT_FALSE(mistral->attention_bias);
}

// Qwen3: head_dim from the config (here 2x hidden / heads), per-head q/k
// norms, no q/k/v biases unless attention_bias (then o_proj has one too).
TEST(ModelConfigTest, Qwen3) {
  auto c = parseHfConfigText(
      R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
          "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 100, "rope_theta": 1000000.0,
          "attention_bias": false, "use_sliding_window": false, "sliding_window": null,
          "max_window_layers": 3, "tie_word_embeddings": true, "torch_dtype": "bfloat16"})",
      "q3.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "qwen3");
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->output_bias);
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->windowOf(2), 0);
  EXPECT_EQ(c->max_position_embeddings, 32768);

  auto biased = parseHfConfigText(llamaJson(R"("attention_bias": true)"), "b.json");
  ASSERT_TRUE(biased.ok()) << biased.error().message;
  EXPECT_TRUE(biased->attention_bias);
  EXPECT_TRUE(biased->output_bias);  // llama's o_proj takes the same flag
  EXPECT_FALSE(biased->qk_norm);
}

// Phi-3 (mini-4k's shape): q/k/v and gate/up fused in the checkpoint, a
// sliding window on every layer, no biases; LongRoPE (the 128k variants) is
// refused by name.
TEST(ModelConfigTest, Phi3) {
  const std::string phi3 = R"({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 3072,
      "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
      "vocab_size": 32064, "max_position_embeddings": 4096, "original_max_position_embeddings": 4096,
      "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 2047, "partial_rotary_factor": 1.0,
      "embd_pdrop": 0.0, "resid_pdrop": 0.0, "attention_dropout": 0.0, "tie_word_embeddings": false)";
  auto c = parseHfConfigText(phi3 + R"(, "rope_scaling": null})", "p.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "phi3");
  EXPECT_TRUE(c->fused_qkv);
  EXPECT_TRUE(c->fused_gate_up);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->head_dim, 96);
  EXPECT_EQ(c->windowOf(0), 2047);
  EXPECT_EQ(c->windowOf(31), 2047);
  EXPECT_EQ(c->rope_style, RopeStyle::kHalf);
  EXPECT_EQ(parseError(phi3 + R"(, "rope_scaling": {"type": "longrope", "long_factor": [1.0], "short_factor": [1.0]}})"),
            "c.json: field 'rope_scaling.rope_type' is 'longrope', supported: default, linear, llama3");
  EXPECT_EQ(parseError(phi3 + R"(, "partial_rotary_factor": 0.75})"),
            "c.json: field 'partial_rotary_factor' is 0.75, kiln rotates whole heads only (1.0)");
}

// gemma-3-1b-it's config.json (text model): five sliding layers of 512 to
// one global, local theta 1e4, query_pre_attn_scalar 256 over head_dim 256.
TEST(ModelConfigTest, Gemma3) {
  const std::string gemma = R"({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
      "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4,
      "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144, "max_position_embeddings": 32768,
      "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": null,
      "query_pre_attn_scalar": 256, "sliding_window": 512, "sliding_window_pattern": 6,
      "hidden_activation": "gelu_pytorch_tanh", "attn_logit_softcapping": null, "final_logit_softcapping": null,
      "attention_bias": false, "torch_dtype": "bfloat16")";
  auto c = parseHfConfigText(gemma + "}", "g.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "gemma3");
  EXPECT_TRUE(c->tie_word_embeddings);  // Gemma3TextConfig's default
  EXPECT_TRUE(c->qk_norm);
  EXPECT_TRUE(c->sandwich_norms);
  EXPECT_EQ(c->norm_weight_offset, 1.0);
  EXPECT_EQ(c->mlp_activation, MlpActivation::kGeluTanh);
  EXPECT_DOUBLE_EQ(c->embedding_scale, std::sqrt(1152.0));
  EXPECT_DOUBLE_EQ(c->attentionScale(), 1.0 / 16);
  for (int64_t l : {0, 4, 6, 24}) EXPECT_EQ(c->windowOf(l), 512) << l;
  for (int64_t l : {5, 11, 23}) EXPECT_EQ(c->windowOf(l), 0) << l;
  EXPECT_EQ(c->ropeThetaOf(0), 10000.0);
  EXPECT_EQ(c->ropeThetaOf(5), 1e6);

  // 4B and up: linear scaling 8 on the global layers only.
  auto scaled = parseHfConfigText(gemma + R"(, "rope_scaling": {"rope_type": "linear", "factor": 8.0}})", "g.json");
  ASSERT_TRUE(scaled.ok()) << scaled.error().message;
  EXPECT_EQ(scaled->rope_scaling.kind, RopeScaling::Kind::kLinear);
  EXPECT_FALSE(scaled->ropeScaledAt(0));
  EXPECT_TRUE(scaled->ropeScaledAt(5));
  // transformers >= 4.56: rope_parameters per layer type.
  auto per_type = parseHfConfigText(R"({"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 100, "head_dim": 32,
      "layer_types": ["sliding_attention", "full_attention"],
      "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                          "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})",
                                    "g.json");
  ASSERT_TRUE(per_type.ok()) << per_type.error().message;
  EXPECT_EQ(per_type->rope_theta, 1e6);
  EXPECT_EQ(per_type->rope_local_theta, 1e4);
  EXPECT_EQ(per_type->rope_scaling.factor, 8.0);
  EXPECT_EQ(per_type->windowOf(0), 4096);

  EXPECT_EQ(parseError(gemma + R"(, "final_logit_softcapping": 30.0})"),
            "c.json: field 'final_logit_softcapping' is 30.0, which kiln does not implement");
  EXPECT_EQ(parseError(gemma + R"(, "hidden_activation": "gelu"})"),
            "c.json: field 'hidden_activation' is 'gelu', kiln runs Gemma 3's 'gelu_pytorch_tanh' only");
  EXPECT_EQ(parseError(gemma + R"(, "use_bidirectional_attention": true})"),
            "c.json: field 'use_bidirectional_attention' is true, kiln runs causal decoders only");
}

// gemma-3-4b-it's config.json (Gemma3ForConditionalGeneration): a sparse
// text_config over Gemma3TextConfig's defaults (8 heads, 4 KV heads of 256,
// vocab 262208, query_pre_attn_scalar 256), the dtype from the outer config.
TEST(ModelConfigTest, Gemma3ImageText) {
  const std::string gemma = R"({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
      "boi_token_index": 255999, "eoi_token_index": 256000, "image_token_index": 262144, "mm_tokens_per_image": 256,
      "initializer_range": 0.02, "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
      "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                        "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                        "patch_size": 14, "vision_use_head": false},
      "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                      "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                      "sliding_window": 1024)";
  auto c = parseHfConfigText(gemma + "}}", "c.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "gemma3");
  EXPECT_TRUE(c->image_text_model);
  EXPECT_EQ(c->source, "c.json");
  EXPECT_EQ(c->hidden_size, 2560);
  EXPECT_EQ(c->num_layers, 34);
  EXPECT_EQ(c->num_heads, 8);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_EQ(c->vocab_size, 262208);
  EXPECT_EQ(c->weight_dtype, ElementType::BF16);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c->attentionScale(), 1.0 / 16);
  EXPECT_EQ(c->windowOf(4), 1024);
  EXPECT_EQ(c->windowOf(5), 0);
  EXPECT_TRUE(c->ropeScaledAt(5));
  EXPECT_FALSE(c->ropeScaledAt(4));
  EXPECT_EQ(c->norm_weight_offset, 1.0);

  EXPECT_EQ(parseError(gemma + R"(, "final_logit_softcapping": 30.0}})"),
            "c.json text_config: field 'final_logit_softcapping' is 30.0, which kiln does not implement");
  EXPECT_EQ(parseError(R"({"model_type": "gemma3", "vision_config": {}})"),
            "c.json: model_type 'gemma3' (Gemma 3's image-text model) has no field 'text_config', expected the "
            "language model's config there");
  EXPECT_EQ(parseError(R"({"model_type": "gemma3", "text_config": {"model_type": "llama"}})"),
            "c.json: field 'text_config.model_type' is \"llama\", expected \"gemma3_text\"");
  EXPECT_EQ(parseError(R"({"model_type": "gemma3", "text_config": [1]})"),
            "c.json: field 'text_config' is an array ([1]), expected an object");
}

// transformers' sliding layers: Mistral slides every layer; Qwen2/3 only
// with use_sliding_window, from max_window_layers on, or as layer_types says.
TEST(ModelConfigTest, SlidingWindowLayers) {
  auto mistral = parseHfConfigText(
      R"({"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
          "sliding_window": 8})",
      "m.json");
  ASSERT_TRUE(mistral.ok()) << mistral.error().message;
  EXPECT_EQ(mistral->windowOf(0), 8);
  EXPECT_EQ(mistral->windowOf(1), 8);
  auto mistral_null = parseHfConfigText(
      R"({"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
          "sliding_window": null})",
      "m.json");
  ASSERT_TRUE(mistral_null.ok()) << mistral_null.error().message;
  EXPECT_EQ(mistral_null->windowOf(0), 0);

  const std::string qwen = R"({"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 100, "sliding_window": 16)";
  auto by_max = parseHfConfigText(qwen + R"(, "use_sliding_window": true, "max_window_layers": 2})", "q.json");
  ASSERT_TRUE(by_max.ok()) << by_max.error().message;
  EXPECT_EQ(by_max->sliding_window, 16);
  EXPECT_EQ(by_max->windowOf(0), 0);
  EXPECT_EQ(by_max->windowOf(1), 0);
  EXPECT_EQ(by_max->windowOf(2), 16);
  EXPECT_EQ(by_max->windowOf(3), 16);
  auto off = parseHfConfigText(qwen + R"(, "use_sliding_window": false, "max_window_layers": 0})", "q.json");
  ASSERT_TRUE(off.ok()) << off.error().message;
  EXPECT_EQ(off->windowOf(3), 0);
  auto by_types = parseHfConfigText(
      qwen + R"(, "use_sliding_window": true, "layer_types": ["sliding_attention", "full_attention",
                 "sliding_attention", "full_attention"]})",
      "q.json");
  ASSERT_TRUE(by_types.ok()) << by_types.error().message;
  EXPECT_EQ(by_types->windowOf(0), 16);
  EXPECT_EQ(by_types->windowOf(1), 0);
  EXPECT_EQ(by_types->windowOf(2), 16);
  // Every layer below max_window_layers: no layer slides.
  auto none = parseHfConfigText(qwen + R"(, "use_sliding_window": true, "max_window_layers": 4})", "q.json");
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_EQ(none->sliding_window, 0);
  EXPECT_TRUE(none->sliding_layers.empty());
}

// Config fields that change the computation in ways kiln does not
// implement are refused by name, never run approximately.
TEST(ModelConfigBadInputTest, UnimplementedFieldsAreRejected) {
  EXPECT_EQ(parseError(llamaJson(R"("rope_scaling": {"rope_type": "longrope", "factor": 4.0})")),
            "c.json: field 'rope_scaling.rope_type' is 'longrope', supported: default, linear, llama3");
  EXPECT_EQ(parseError(llamaJson(R"("rope_scaling": {"type": "su", "short_factor": [1.0]})")),
            "c.json: field 'rope_scaling.rope_type' is 'su', supported: default, linear, llama3");
  EXPECT_EQ(parseError(llamaJson(R"("rope_scaling": {"rope_type": "dynamic", "factor": 2.0})")),
            "c.json: field 'rope_scaling.rope_type' is 'dynamic', supported: default, linear, llama3");
  EXPECT_EQ(parseError(llamaJson(R"("hidden_act": "gelu_pytorch_tanh")")),
            "c.json: field 'hidden_act' is 'gelu_pytorch_tanh', only 'silu' is supported");
  EXPECT_EQ(parseError(llamaJson(R"("attn_logit_softcapping": 50.0)")),
            "c.json: field 'attn_logit_softcapping' is 50.0, which kiln does not implement");
  EXPECT_EQ(parseError(llamaJson(R"("final_logit_softcapping": 30.0)")),
            "c.json: field 'final_logit_softcapping' is 30.0, which kiln does not implement");
  EXPECT_EQ(parseError(llamaJson(R"("attention_sinks": true)")),
            "c.json: field 'attention_sinks' is true, which kiln does not implement");
  EXPECT_EQ(parseError(llamaJson(R"("partial_rotary_factor": 0.5)")),
            "c.json: field 'partial_rotary_factor' is 0.5, kiln rotates whole heads only (1.0)");
  EXPECT_EQ(parseError(llamaJson(R"("dual_chunk_attention_config": {"chunk_size": 262144})")),
            "c.json: field 'dual_chunk_attention_config' is {\"chunk_size\":262144}, which kiln does not "
            "implement");
  // A field whose default means "off" is accepted when it says so.
  EXPECT_EQ(parseError(llamaJson(R"("attn_logit_softcapping": null, "partial_rotary_factor": 1.0)")), "<parsed>");

  const std::string qwen = R"({"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100)";
  EXPECT_EQ(parseError(qwen + R"(, "use_sliding_window": true, "sliding_window": 8,
                                   "layer_types": ["full_attention", "chunked_attention"]})"),
            "c.json: field 'layer_types[1]' is 'chunked_attention', supported: full_attention, sliding_attention");
  EXPECT_EQ(parseError(qwen + R"(, "layer_types": ["full_attention", "sliding_attention"]})"),
            "c.json: field 'layer_types[1]' is 'sliding_attention' but the config sets no window "
            "(use_sliding_window false or sliding_window null)");
  EXPECT_EQ(parseError(qwen + R"(, "use_sliding_window": true, "sliding_window": 8,
                                   "layer_types": ["full_attention"]})"),
            "c.json: field 'layer_types' has 1 entries, expected num_hidden_layers 2");
  EXPECT_EQ(parseError(R"({"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128,
                          "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
                          "sliding_window": -4})"),
            "c.json: field 'sliding_window' is -4, expected a positive window or null");
}

// Mixtral: num_local_experts of intermediate_size on every layer, the top
// two renormalized, the window on every layer as Mistral's; transformers'
// defaults (8 experts, 2 a token) when the config leaves them out.
TEST(ModelConfigTest, Mixtral) {
  const std::string mixtral = R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64,
      "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
      "vocab_size": 100, "sliding_window": 7, "router_jitter_noise": 0.1, "output_router_logits": true)";
  auto c = parseHfConfigText(mixtral + R"(, "num_local_experts": 4, "num_experts_per_tok": 3})", "m.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "mixtral");
  EXPECT_EQ(c->num_experts, 4);
  EXPECT_EQ(c->experts_per_token, 3);
  EXPECT_EQ(c->moe_intermediate_size, 96);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_EQ(c->sliding_window, 7);
  EXPECT_FALSE(c->qk_norm);
  for (int64_t l = 0; l < 3; ++l) EXPECT_TRUE(c->isMoeLayer(l));
  EXPECT_FALSE(c->isMoeLayer(3));
  auto defaults = parseHfConfigText(mixtral + "}", "m.json");
  ASSERT_TRUE(defaults.ok()) << defaults.error().message;
  EXPECT_EQ(defaults->num_experts, 8);
  EXPECT_EQ(defaults->experts_per_token, 2);
}

// Qwen3-MoE: moe_intermediate_size experts, norm_topk_prob (default false),
// and layer i sparse when (i + 1) % decoder_sparse_step == 0 and i is not
// in mlp_only_layers; q/k norm as Qwen3.
TEST(ModelConfigTest, Qwen3Moe) {
  const std::string qwen = R"({"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 100,
      "num_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 24)";
  auto c = parseHfConfigText(qwen + R"(, "decoder_sparse_step": 2, "mlp_only_layers": [3]})", "q.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "qwen3_moe");
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->num_experts, 16);
  EXPECT_EQ(c->experts_per_token, 4);
  EXPECT_EQ(c->moe_intermediate_size, 24);
  EXPECT_FALSE(c->norm_topk_prob);
  std::vector<bool> moe;
  for (int64_t l = 0; l < 6; ++l) moe.push_back(c->isMoeLayer(l));
  EXPECT_EQ(moe, (std::vector<bool>{false, true, false, false, false, true}));
  auto normed = parseHfConfigText(qwen + R"(, "norm_topk_prob": true})", "q.json");
  ASSERT_TRUE(normed.ok()) << normed.error().message;
  EXPECT_TRUE(normed->norm_topk_prob);
  for (int64_t l = 0; l < 6; ++l) EXPECT_TRUE(normed->isMoeLayer(l));
}

// Other MoE families' features change what inference computes: each is
// refused by name, and accepted where it says "off".
TEST(ModelConfigBadInputTest, UnimplementedMoeFieldsAreRejected) {
  const std::string qwen = R"({"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "num_experts": 8,
      "num_experts_per_tok": 2, "moe_intermediate_size": 32, )";
  EXPECT_EQ(parseError(qwen + R"("shared_expert_intermediate_size": 64})"),
            "c.json: field 'shared_expert_intermediate_size' is 64, which kiln does not implement (it runs 0 (no "
            "shared expert) only)");
  EXPECT_EQ(parseError(qwen + R"("n_shared_experts": 1})"),
            "c.json: field 'n_shared_experts' is 1, which kiln does not implement (it runs 0 (no shared expert) only)");
  EXPECT_EQ(parseError(qwen + R"("scoring_func": "sigmoid"})"),
            "c.json: field 'scoring_func' is \"sigmoid\", which kiln does not implement (it runs 'softmax' only)");
  EXPECT_EQ(parseError(qwen + R"("topk_method": "noaux_tc"})"),
            "c.json: field 'topk_method' is \"noaux_tc\", which kiln does not implement (it runs 'greedy' only)");
  EXPECT_EQ(parseError(qwen + R"("routed_scaling_factor": 2.5})"),
            "c.json: field 'routed_scaling_factor' is 2.5, which kiln does not implement (it runs 1 only)");
  EXPECT_EQ(parseError(qwen + R"("n_group": 8, "topk_group": 4})"),
            "c.json: field 'n_group' is 8, which kiln does not implement (it runs 1 (ungrouped routing) only)");
  EXPECT_EQ(parseError(qwen + R"("first_k_dense_replace": 1})"),
            "c.json: field 'first_k_dense_replace' is 1, which kiln does not implement (it runs 0 only)");
  EXPECT_EQ(parseError(qwen + R"("shared_expert_intermediate_size": 0, "scoring_func": "softmax"})"), "<parsed>");
  EXPECT_EQ(parseError(qwen + R"("num_experts_per_tok": 9})"),
            "c.json: experts_per_token (num_experts_per_tok) is 9, expected 1..8");
  EXPECT_EQ(parseError(qwen + R"("mlp_only_layers": [2]})"),
            "c.json: field 'mlp_only_layers[0]' is 2, expected a layer index below 2");
  EXPECT_EQ(parseError(qwen + R"("decoder_sparse_step": 0})"),
            "c.json: field 'decoder_sparse_step' is 0, expected a positive period");
}

TEST(ModelConfigBadInputTest, MissingAndIllTypedFields) {
  EXPECT_EQ(parseError(R"({"model_type": "llama"})"),
            "c.json: missing field 'hidden_size' (expected an integer)");
  EXPECT_EQ(parseError(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                          "num_hidden_layers": 2, "num_attention_heads": 4})"),
            "c.json: missing field 'vocab_size' (expected an integer)");
  EXPECT_EQ(parseError(R"({"model_type": "llama", "hidden_size": "4096"})"),
            "c.json: field 'hidden_size' is a string (\"4096\"), expected an integer");
  EXPECT_EQ(parseError(R"({"model_type": "llama", "hidden_size": 4096.5})"),
            "c.json: field 'hidden_size' is a number (4096.5), expected an integer");
  EXPECT_EQ(parseError(llamaJson(R"("rms_norm_eps": "1e-5")")),
            "c.json: field 'rms_norm_eps' is a string (\"1e-5\"), expected a number");
  EXPECT_EQ(parseError(llamaJson(R"("tie_word_embeddings": 1)")),
            "c.json: field 'tie_word_embeddings' is an integer (1), expected a boolean");
  EXPECT_EQ(parseError(llamaJson(R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})")),
            "c.json: missing field 'rope_scaling.low_freq_factor' (expected a number)");
  EXPECT_EQ(parseError(llamaJson(R"("rope_scaling": [1])")),
            "c.json: field 'rope_scaling' is an array, expected an object or null");
  EXPECT_EQ(parseError(llamaJson(R"("torch_dtype": "int8")")),
            "c.json: field 'torch_dtype' is 'int8', expected bfloat16, float16 or float32");
  EXPECT_EQ(parseError("{\"model_type\": "),
            "c.json: not valid JSON: [json.exception.parse_error.101] parse error at line 1, "
            "column 16: syntax error while parsing value - unexpected end of input; expected "
            "'[', '{', or a literal");
  EXPECT_EQ(parseError("[]"), "c.json: top level is an array, expected an object");
}

TEST(ModelConfigBadInputTest, UnsupportedArchitecture) {
  EXPECT_EQ(parseError(R"({"model_type": "gpt2"})"),
            "c.json: model_type 'gpt2' is not supported; supported: llama, mistral, qwen2, qwen3, phi3, gemma3_text, "
            "mixtral, qwen3_moe");
  EXPECT_EQ(parseError(R"({"architectures": ["GPT2LMHeadModel"]})"),
            "c.json: architectures[0] 'GPT2LMHeadModel' is not supported; supported: "
            "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, "
            "Gemma3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM");
  EXPECT_EQ(parseError("{}"),
            "c.json: missing field 'model_type' (expected a string: llama, mistral, qwen2, qwen3, phi3, gemma3_text, "
            "mixtral, qwen3_moe)");
  EXPECT_EQ(parseError(R"({"model_type": "qwen2_moe"})"),
            "c.json: model_type 'qwen2_moe' is not supported; supported: llama, mistral, qwen2, qwen3, phi3, "
            "gemma3_text, mixtral, qwen3_moe");
  EXPECT_EQ(parseError(llamaJson(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0})")),
            "c.json: field 'rope_scaling.rope_type' is 'yarn', supported: default, linear, llama3");
  EXPECT_EQ(parseError(llamaJson(R"("hidden_act": "gelu")")),
            "c.json: field 'hidden_act' is 'gelu', only 'silu' is supported");
}

TEST(ModelConfigBadInputTest, Validate) {
  EXPECT_EQ(parseError(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                          "num_hidden_layers": 2, "num_attention_heads": 4,
                          "num_key_value_heads": 3, "vocab_size": 100})"),
            "c.json: num_heads 4 is not a multiple of num_kv_heads 3");
  EXPECT_EQ(parseError(R"({"model_type": "llama", "hidden_size": 66, "intermediate_size": 128,
                          "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100})"),
            "c.json: hidden_size 66 is not a multiple of num_heads 4 and no head_dim gives the head size");
  EXPECT_EQ(parseError(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 0,
                          "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100})"),
            "c.json: intermediate_size is 0, expected a positive value");
  EXPECT_EQ(parseError(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                          "num_hidden_layers": 2, "num_attention_heads": 4,
                          "vocab_size": 4294967296})"),
            "c.json: vocab_size is 4294967296, expected at most 2147483647");
  ModelConfig c;
  c.architecture = "llama";
  EXPECT_EQ(c.validate().error().message, "model config: hidden_size is 0, expected a positive value");
  c.architecture = "gemma2";
  EXPECT_EQ(c.validate().error().message,
            "model config: architecture 'gemma2' is not supported; supported: llama, mistral, qwen2, qwen3, phi3, "
            "gemma3_text, mixtral, qwen3_moe");
}

TEST(ModelConfigTest, MissingFile) {
  auto c = parseHfConfig("/nonexistent/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message, "/nonexistent/config.json: cannot open: No such file or directory");
}

// GGUF metadata as llama.cpp's converter writes it for a 2-layer llama.
testing::GgufWriter tinyLlamaGguf(bool with_output) {
  testing::GgufWriter w;
  w.addString("general.architecture", "llama")
      .addUInt32("llama.block_count", 2)
      .addUInt32("llama.context_length", 512)
      .addUInt32("llama.embedding_length", 64)
      .addUInt32("llama.feed_forward_length", 96)
      .addUInt32("llama.attention.head_count", 4)
      .addUInt32("llama.attention.head_count_kv", 2)
      .addFloat32("llama.rope.freq_base", 500000.f)
      .addFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.addTensorFilled("token_embd.weight", {50, 64}, ElementType::F16);
  w.addTensorFilled("blk.0.attn_q.weight", {64, 64}, ElementType::Q8_0);
  if (with_output) w.addTensorFilled("output.weight", {50, 64}, ElementType::Q8_0);
  return w;
}

TEST(ModelConfigTest, FromGgufMetadata) {
  std::vector<uint8_t> bytes = tinyLlamaGguf(false).serialize();
  auto f = GgufFile::openBuffer(bytes, "t.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  auto c = configFromGguf(*f);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->num_layers, 2);
  EXPECT_EQ(c->max_position_embeddings, 512);
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->intermediate_size, 96);
  EXPECT_EQ(c->num_heads, 4);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->vocab_size, 50);  // from token_embd rows
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-5f);
  EXPECT_EQ(c->rope_style, RopeStyle::kInterleaved);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->weight_dtype, ElementType::Q8_0);

  std::vector<uint8_t> untied = tinyLlamaGguf(true).serialize();
  EXPECT_FALSE(configFromGguf(*GgufFile::openBuffer(untied, "u.gguf"))->tie_word_embeddings);
}

// llama.cpp's qwen3 GGUFs: neox rope pairs (no Q/K permutation), head_dim
// from attention.key_length, per-head q/k norms.
TEST(ModelConfigTest, Qwen3FromGgufMetadata) {
  testing::GgufWriter w;
  w.addString("general.architecture", "qwen3")
      .addUInt32("qwen3.block_count", 2)
      .addUInt32("qwen3.context_length", 512)
      .addUInt32("qwen3.embedding_length", 64)
      .addUInt32("qwen3.feed_forward_length", 96)
      .addUInt32("qwen3.attention.head_count", 4)
      .addUInt32("qwen3.attention.head_count_kv", 2)
      .addUInt32("qwen3.attention.key_length", 32)
      .addUInt32("qwen3.attention.value_length", 32)
      .addFloat32("qwen3.rope.freq_base", 1000000.f)
      .addFloat32("qwen3.attention.layer_norm_rms_epsilon", 1e-6f);
  w.addTensorFilled("token_embd.weight", {50, 64}, ElementType::F32);
  std::vector<uint8_t> bytes = w.serialize();
  auto f = GgufFile::openBuffer(bytes, "q.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  auto c = configFromGguf(*f);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "qwen3");
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->rope_style, RopeStyle::kHalf);
  EXPECT_EQ(c->rope_theta, 1000000.0);
}

// llama.cpp's qwen3moe: expert_count and expert_used_count, the experts'
// own feed_forward length; its top-k weights are always renormalized.
TEST(ModelConfigTest, Qwen3MoeFromGgufMetadata) {
  testing::GgufWriter w;
  w.addString("general.architecture", "qwen3moe")
      .addUInt32("qwen3moe.block_count", 2)
      .addUInt32("qwen3moe.context_length", 512)
      .addUInt32("qwen3moe.embedding_length", 64)
      .addUInt32("qwen3moe.feed_forward_length", 96)
      .addUInt32("qwen3moe.expert_feed_forward_length", 24)
      .addUInt32("qwen3moe.expert_count", 8)
      .addUInt32("qwen3moe.expert_used_count", 2)
      .addUInt32("qwen3moe.attention.head_count", 4)
      .addUInt32("qwen3moe.attention.head_count_kv", 2)
      .addFloat32("qwen3moe.attention.layer_norm_rms_epsilon", 1e-6f);
  w.addTensorFilled("token_embd.weight", {50, 64}, ElementType::F32);
  std::vector<uint8_t> bytes = w.serialize();
  auto f = GgufFile::openBuffer(bytes, "q.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  auto c = configFromGguf(*f);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "qwen3_moe");
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->rope_style, RopeStyle::kHalf);
  EXPECT_EQ(c->num_experts, 8);
  EXPECT_EQ(c->experts_per_token, 2);
  EXPECT_EQ(c->moe_intermediate_size, 24);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_TRUE(c->isMoeLayer(1));
}

// llama.cpp's phi3: fused attn_qkv and ffn_up (gate and up), neox rope,
// the window from attention.sliding_window; LongRoPE factor tensors refused.
TEST(ModelConfigTest, Phi3FromGgufMetadata) {
  auto phi3 = [](bool long_rope) {
    testing::GgufWriter w;
    w.addString("general.architecture", "phi3")
        .addUInt32("phi3.block_count", 2)
        .addUInt32("phi3.context_length", 4096)
        .addUInt32("phi3.embedding_length", 128)
        .addUInt32("phi3.feed_forward_length", 256)
        .addUInt32("phi3.attention.head_count", 2)
        .addUInt32("phi3.attention.head_count_kv", 2)
        .addUInt32("phi3.attention.sliding_window", 2047)
        .addFloat32("phi3.rope.freq_base", 10000.f)
        .addFloat32("phi3.attention.layer_norm_rms_epsilon", 1e-5f);
    w.addTensorFilled("token_embd.weight", {50, 128}, ElementType::F32);
    w.addTensorFilled("blk.0.attn_qkv.weight", {384, 128}, ElementType::Q8_0);
    if (long_rope) w.addTensorFilled("rope_factors_long.weight", {32}, ElementType::F32);
    return w.serialize();
  };
  std::vector<uint8_t> bytes = phi3(false);
  auto c = configFromGguf(*GgufFile::openBuffer(bytes, "p.gguf"));
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_TRUE(c->fused_qkv);
  EXPECT_TRUE(c->fused_gate_up);
  EXPECT_EQ(c->rope_style, RopeStyle::kHalf);
  EXPECT_EQ(c->windowOf(1), 2047);
  EXPECT_EQ(c->weight_dtype, ElementType::Q8_0);
  bytes = phi3(true);
  EXPECT_EQ(configFromGguf(*GgufFile::openBuffer(bytes, "p.gguf")).error().message,
            "p.gguf: tensor 'rope_factors_long.weight' asks for LongRoPE scaling, which kiln does not implement");
}

// llama.cpp's gemma3 as its converter writes gemma-3-4b: norms stored with
// Gemma's 1 added (no offset at load), neox rope, layer i sliding unless
// i % 6 == 5 at the local base 1e4, q scaled by key_length^-1/2.
testing::GgufWriter gemma3Gguf(uint32_t layers, uint32_t hidden = 2560, uint32_t heads = 8, uint32_t head_dim = 256) {
  testing::GgufWriter w;
  w.addString("general.architecture", "gemma3")
      .addUInt32("gemma3.context_length", 131072)
      .addUInt32("gemma3.embedding_length", hidden)
      .addUInt32("gemma3.block_count", layers)
      .addUInt32("gemma3.feed_forward_length", 10240)
      .addUInt32("gemma3.attention.head_count", heads)
      .addFloat32("gemma3.attention.layer_norm_rms_epsilon", 1e-6f)
      .addUInt32("gemma3.attention.key_length", head_dim)
      .addUInt32("gemma3.attention.value_length", head_dim)
      .addFloat32("gemma3.rope.freq_base", 1000000.f)
      .addUInt32("gemma3.attention.head_count_kv", heads / 2)
      .addString("gemma3.rope.scaling.type", "linear")
      .addFloat32("gemma3.rope.scaling.factor", 8.f);
  w.addTensorFilled("token_embd.weight", {64, hidden}, ElementType::F16);
  return w;
}

TEST(ModelConfigTest, Gemma3FromGgufMetadata) {
  auto config = [](testing::GgufWriter w) {
    std::vector<uint8_t> bytes = w.serialize();
    return configFromGguf(*GgufFile::openBuffer(bytes, "g.gguf"));
  };
  auto c = config(gemma3Gguf(34).addUInt32("gemma3.attention.sliding_window", 1024));
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->architecture, "gemma3");
  EXPECT_EQ(c->rope_style, RopeStyle::kHalf);
  EXPECT_TRUE(c->qk_norm);
  EXPECT_TRUE(c->sandwich_norms);
  EXPECT_EQ(c->norm_weight_offset, 0.0);
  EXPECT_EQ(c->mlp_activation, MlpActivation::kGeluTanh);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c->embedding_scale, std::sqrt(2560.0));
  EXPECT_DOUBLE_EQ(c->attentionScale(), 1.0 / 16);
  for (int64_t l : {0, 4, 6, 33}) EXPECT_EQ(c->windowOf(l), 1024) << l;
  for (int64_t l : {5, 11, 29}) EXPECT_EQ(c->windowOf(l), 0) << l;
  EXPECT_EQ(c->ropeThetaOf(0), 10000.0);
  EXPECT_EQ(c->ropeThetaOf(5), 1e6);
  EXPECT_FALSE(c->ropeScaledAt(0));
  EXPECT_TRUE(c->ropeScaledAt(5));
  EXPECT_EQ(c->rope_scaling.factor, 8.0);

  // The 27B (62 layers, hidden 5376 over 32 heads): q scaled by (hidden / heads)^-1/2.
  auto big = config(gemma3Gguf(62, 5376, 32, 128).addUInt32("gemma3.attention.sliding_window", 1024));
  ASSERT_TRUE(big.ok()) << big.error().message;
  EXPECT_DOUBLE_EQ(big->attentionScale(), 1.0 / std::sqrt(168.0));

  // The period and the local base from the file; a per-layer pattern.
  auto period = config(gemma3Gguf(6)
                           .addUInt32("gemma3.attention.sliding_window", 10)
                           .addUInt32("gemma3.attention.sliding_window_pattern", 3)
                           .addFloat32("gemma3.rope.freq_base_swa", 20000.f));
  ASSERT_TRUE(period.ok()) << period.error().message;
  EXPECT_EQ(period->sliding_layers, (std::vector<bool>{true, true, false, true, true, false}));
  EXPECT_EQ(period->ropeThetaOf(0), 20000.0);
  std::vector<uint8_t> flags = {0, 1, 1, 0};
  auto listed = config(gemma3Gguf(4)
                           .addUInt32("gemma3.attention.sliding_window", 10)
                           .add("gemma3.attention.sliding_window_pattern",
                                testing::ggufScalarArray(GgufValueType::kBool, 4, flags)));
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  EXPECT_EQ(listed->sliding_layers, (std::vector<bool>{false, true, true, false}));

  // No window (llama.cpp's non-sliding gemma3): every layer global, one theta.
  auto global = config(gemma3Gguf(6));
  ASSERT_TRUE(global.ok()) << global.error().message;
  EXPECT_EQ(global->sliding_window, 0);
  EXPECT_EQ(global->ropeThetaOf(0), 1e6);
  EXPECT_TRUE(global->ropeScaledAt(0));
}

TEST(ModelConfigBadInputTest, Gemma3FromGgufMetadata) {
  auto error = [](testing::GgufWriter w) {
    std::vector<uint8_t> bytes = w.serialize();
    return configFromGguf(*GgufFile::openBuffer(bytes, "g.gguf")).error().message;
  };
  EXPECT_EQ(error(gemma3Gguf(6).addFloat32("gemma3.final_logit_softcapping", 30.f)),
            "g.gguf: metadata 'gemma3.final_logit_softcapping' is 30, which kiln does not implement");
  EXPECT_EQ(error(gemma3Gguf(4)
                      .addUInt32("gemma3.attention.sliding_window", 10)
                      .add("gemma3.attention.sliding_window_pattern", testing::ggufInt32Array({1, 0, 1, 0}))),
            "g.gguf: metadata 'gemma3.attention.sliding_window_pattern' is array[int32] of 4, expected an integer "
            "period or array[bool] of one entry a layer (4)");
  EXPECT_EQ(error(gemma3Gguf(70000).addUInt32("gemma3.attention.sliding_window", 10)),
            "g.gguf: metadata 'gemma3.block_count' is 70000, expected 1 to 65536");
}

TEST(ModelConfigBadInputTest, FromGgufMetadata) {
  testing::GgufWriter w;
  w.addString("general.architecture", "gpt2");
  std::vector<uint8_t> bytes = w.serialize();
  EXPECT_EQ(configFromGguf(*GgufFile::openBuffer(bytes, "t.gguf")).error().message,
            "t.gguf: general.architecture 'gpt2' is not supported; supported: llama, mistral, "
            "qwen2, qwen3, phi3, qwen3moe, gemma3");
  testing::GgufWriter m;
  m.addString("general.architecture", "llama").addString("llama.block_count", "2");
  bytes = m.serialize();
  EXPECT_EQ(configFromGguf(*GgufFile::openBuffer(bytes, "t.gguf")).error().message,
            "t.gguf: metadata 'llama.block_count' is string, expected an integer");
  testing::GgufWriter n;
  n.addString("general.architecture", "llama").addUInt32("llama.block_count", 2);
  bytes = n.serialize();
  EXPECT_EQ(configFromGguf(*GgufFile::openBuffer(bytes, "t.gguf")).error().message,
            "t.gguf: metadata 'llama.embedding_length' not found");
}

TEST(ModelConfigRealModelTest, SmolLM2) {
  const std::string path = testing::smollm2GgufPath();
  KILN_REQUIRE_MODEL_FILE(path);
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  auto c = configFromGguf(*f);
  ASSERT_TRUE(c.ok()) << c.error().message;
  // Values from the Python gguf package's view of the file.
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_EQ(c->num_layers, 30);
  EXPECT_EQ(c->hidden_size, 576);
  EXPECT_EQ(c->intermediate_size, 1536);
  EXPECT_EQ(c->num_heads, 9);
  EXPECT_EQ(c->num_kv_heads, 3);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->vocab_size, 49152);
  EXPECT_EQ(c->max_position_embeddings, 8192);
  EXPECT_EQ(c->rope_theta, 100000.0);
  EXPECT_FLOAT_EQ(c->rms_norm_eps, 1e-5f);
  EXPECT_EQ(c->rope_style, RopeStyle::kInterleaved);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->weight_dtype, ElementType::Q4_1);
}

}  // namespace
}  // namespace kiln::formats
