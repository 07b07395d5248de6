#include "models/formats/model_source.h"

#include <gtest/gtest.h>

#include <fstream>

#include "models/formats/testing/gguf_writer.h"
#include "models/formats/testing/model_files.h"
#include "models/formats/testing/safetensors_writer.h"
#include "models/formats/testing/temp_dir.h"
#include "test/source_root.h"

namespace kiln::formats {
namespace {

const std::string kFixtures = checkoutPath("test/models");

// A 2-layer llama GGUF: hidden 64, 4 heads / 2 kv heads of 16, ffn 96, vocab 50.
testing::GgufWriter tinyLlama(bool tied, bool drop_q1 = false, bool bad_k0 = false) {
  testing::GgufWriter w;
  w.addString("general.architecture", "llama")
      .addUInt32("llama.block_count", 2)
      .addUInt32("llama.context_length", 512)
      .addUInt32("llama.embedding_length", 64)
      .addUInt32("llama.feed_forward_length", 96)
      .addUInt32("llama.attention.head_count", 4)
      .addUInt32("llama.attention.head_count_kv", 2)
      .addFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.addTensorFilled("token_embd.weight", {50, 64}, ElementType::Q8_0);
  for (int i = 0; i < 2; ++i) {
    std::string p = "blk." + std::to_string(i) + ".";
    w.addTensorFilled(p + "attn_norm.weight", {64}, ElementType::F32);
    if (!(drop_q1 && i == 1)) w.addTensorFilled(p + "attn_q.weight", {64, 64}, ElementType::Q4_0);
    w.addTensorFilled(p + "attn_k.weight", {bad_k0 && i == 0 ? 64 : 32, 64}, ElementType::Q4_0);
    w.addTensorFilled(p + "attn_v.weight", {32, 64}, ElementType::Q4_0);
    w.addTensorFilled(p + "attn_output.weight", {64, 64}, ElementType::Q4_0);
    w.addTensorFilled(p + "ffn_norm.weight", {64}, ElementType::F32);
    w.addTensorFilled(p + "ffn_gate.weight", {96, 64}, ElementType::Q4_0);
    w.addTensorFilled(p + "ffn_up.weight", {96, 64}, ElementType::Q4_0);
    w.addTensorFilled(p + "ffn_down.weight", {64, 96}, ElementType::Q4_0);
  }
  w.addTensorFilled("output_norm.weight", {64}, ElementType::F32);
  if (!tied) w.addTensorFilled("output.weight", {50, 64}, ElementType::Q8_0);
  return w;
}

TEST(ModelSourceTest, GgufNamesAndLookup) {
  testing::TempDir dir;
  std::string path = dir.file("tiny.gguf");
  ASSERT_TRUE(tinyLlama(/*tied=*/true).writeFile(path).ok());
  auto src = ModelSource::open(path, OpenMode::kWithData);
  ASSERT_TRUE(src.ok()) << src.error().message;
  EXPECT_EQ(src->format(), ModelSource::Format::kGguf);
  EXPECT_NE(src->gguf(), nullptr);
  EXPECT_EQ(src->config().num_layers, 2);
  EXPECT_TRUE(src->config().tie_word_embeddings);
  EXPECT_EQ(src->tensors().size(), 1u + 2 * 9 + 1);
  ASSERT_TRUE(src->checkWeights().ok()) << src->checkWeights().error().message;

  EXPECT_EQ(src->weightName(WeightRole::kQ, 1), "blk.1.attn_q.weight");
  EXPECT_EQ(src->weightName(WeightRole::kO, 0), "blk.0.attn_output.weight");
  EXPECT_EQ(src->weightName(WeightRole::kFfnNorm, 1), "blk.1.ffn_norm.weight");
  EXPECT_EQ(src->weightName(WeightRole::kKBias, 0), "blk.0.attn_k.bias");
  EXPECT_EQ(src->weightName(WeightRole::kFinalNorm), "output_norm.weight");
  EXPECT_EQ(src->weightName(WeightRole::kLmHead), "token_embd.weight");  // tied
  EXPECT_EQ(src->weight(WeightRole::kLmHead), src->weight(WeightRole::kTokenEmbedding));
  EXPECT_EQ(src->weight(WeightRole::kDown, 1)->shape, (std::vector<int64_t>{64, 96}));
  EXPECT_EQ(src->weight(WeightRole::kQ, 2), nullptr);   // past num_layers
  EXPECT_EQ(src->weight(WeightRole::kQ, -1), nullptr);
  EXPECT_EQ(src->weight(WeightRole::kQBias, 0), nullptr);

  auto data = src->weightData(WeightRole::kK, 1);
  ASSERT_TRUE(data.ok()) << data.error().message;
  EXPECT_EQ(data->size(), 32u * 64 / 32 * 18);
  EXPECT_EQ(src->weightData(WeightRole::kQBias, 0).error().message,
            path + ": no tensor 'blk.0.attn_q.bias' for attn_q_bias");
}

TEST(ModelSourceTest, GgufUntiedHead) {
  testing::TempDir dir;
  std::string path = dir.file("tiny.gguf");
  ASSERT_TRUE(tinyLlama(/*tied=*/false).writeFile(path).ok());
  auto src = ModelSource::open(path, OpenMode::kHeaderOnly);
  ASSERT_TRUE(src.ok()) << src.error().message;
  EXPECT_FALSE(src->config().tie_word_embeddings);
  EXPECT_EQ(src->weightName(WeightRole::kLmHead), "output.weight");
  EXPECT_TRUE(src->checkWeights().ok());
}

TEST(ModelSourceBadInputTest, MissingAndMisshapenWeights) {
  testing::TempDir dir;
  std::string path = dir.file("tiny.gguf");
  ASSERT_TRUE(tinyLlama(true, /*drop_q1=*/true).writeFile(path).ok());
  auto src = ModelSource::open(path, OpenMode::kHeaderOnly);
  ASSERT_TRUE(src.ok()) << src.error().message;
  EXPECT_EQ(src->checkWeights().error().message,
            path + ": missing tensor 'blk.1.attn_q.weight' (attn_q of layer 1), expected shape "
                   "[64, 64]");
  ASSERT_TRUE(tinyLlama(true, false, /*bad_k0=*/true).writeFile(path).ok());
  src = ModelSource::open(path, OpenMode::kHeaderOnly);
  ASSERT_TRUE(src.ok()) << src.error().message;
  EXPECT_EQ(src->checkWeights().error().message,
            path + ": tensor 'blk.0.attn_k.weight' has shape [64, 64], expected [32, 64]");
}

// A 2-layer qwen3 GGUF as llama.cpp names it: head_dim 32 (2x hidden /
// heads), per-head attn_q_norm / attn_k_norm of head_dim.
testing::GgufWriter tinyQwen3(bool with_norms, const std::string& extra = "") {
  testing::GgufWriter w;
  w.addString("general.architecture", "qwen3")
      .addUInt32("qwen3.block_count", 2)
      .addUInt32("qwen3.context_length", 512)
      .addUInt32("qwen3.embedding_length", 64)
      .addUInt32("qwen3.feed_forward_length", 96)
      .addUInt32("qwen3.attention.head_count", 4)
      .addUInt32("qwen3.attention.head_count_kv", 2)
      .addUInt32("qwen3.attention.key_length", 32)
      .addFloat32("qwen3.attention.layer_norm_rms_epsilon", 1e-6f);
  w.addTensorFilled("token_embd.weight", {50, 64}, ElementType::F32);
  for (int i = 0; i < 2; ++i) {
    std::string p = "blk." + std::to_string(i) + ".";
    w.addTensorFilled(p + "attn_norm.weight", {64}, ElementType::F32);
    w.addTensorFilled(p + "attn_q.weight", {128, 64}, ElementType::F32);
    w.addTensorFilled(p + "attn_k.weight", {64, 64}, ElementType::F32);
    w.addTensorFilled(p + "attn_v.weight", {64, 64}, ElementType::F32);
    if (with_norms) {
      w.addTensorFilled(p + "attn_q_norm.weight", {32}, ElementType::F32);
      w.addTensorFilled(p + "attn_k_norm.weight", {32}, ElementType::F32);
    }
    w.addTensorFilled(p + "attn_output.weight", {64, 128}, ElementType::F32);
    w.addTensorFilled(p + "ffn_norm.weight", {64}, ElementType::F32);
    w.addTensorFilled(p + "ffn_gate.weight", {96, 64}, ElementType::F32);
    w.addTensorFilled(p + "ffn_up.weight", {96, 64}, ElementType::F32);
    w.addTensorFilled(p + "ffn_down.weight", {64, 96}, ElementType::F32);
    if (!extra.empty()) w.addTensorFilled(p + extra, {4}, ElementType::F32);
  }
  w.addTensorFilled("output_norm.weight", {64}, ElementType::F32);
  return w;
}

TEST(ModelSourceTest, Qwen3GgufQkNorms) {
  testing::TempDir dir;
  std::string path = dir.file("qwen3.gguf");
  ASSERT_TRUE(tinyQwen3(/*with_norms=*/true).writeFile(path).ok());
  auto src = ModelSource::open(path, OpenMode::kHeaderOnly);
  ASSERT_TRUE(src.ok()) << src.error().message;
  ASSERT_TRUE(src->checkWeights().ok()) << src->checkWeights().error().message;
  EXPECT_EQ(src->weightName(WeightRole::kQNorm, 1), "blk.1.attn_q_norm.weight");
  EXPECT_EQ(src->weightName(WeightRole::kKNorm, 0), "blk.0.attn_k_norm.weight");
  EXPECT_EQ(src->expectedShape(WeightRole::kQNorm), (std::vector<int64_t>{32}));
  EXPECT_EQ(src->expectedShape(WeightRole::kQ), (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(src->expectedShape(WeightRole::kO), (std::vector<int64_t>{64, 128}));

  ASSERT_TRUE(tinyQwen3(/*with_norms=*/false).writeFile(path).ok());
  src = ModelSource::open(path, OpenMode::kHeaderOnly);
  ASSERT_TRUE(src.ok()) << src.error().message;
  EXPECT_EQ(src->checkWeights().error().message,
            path + ": missing tensor 'blk.0.attn_q_norm.weight' (attn_q_norm of layer 0), expected shape [32]");
}

// Phi-3's HF checkpoint: q/k/v in one qkv_proj, gate/up in one
// gate_up_proj; the separate roles are not part of its graph.
TEST(ModelSourceTest, Phi3FusedProjections) {
  const std::string dir = kFixtures + "/tiny-phi3";
  auto src = ModelSource::open(dir, OpenMode::kHeaderOnly);
  ASSERT_TRUE(src.ok()) << src.error().message;
  ASSERT_TRUE(src->checkWeights().ok()) << src->checkWeights().error().message;
  EXPECT_EQ(src->weightName(WeightRole::kQkv, 1), "model.layers.1.self_attn.qkv_proj.weight");
  EXPECT_EQ(src->weightName(WeightRole::kGateUp, 0), "model.layers.0.mlp.gate_up_proj.weight");
  EXPECT_EQ(src->expectedShape(WeightRole::kQkv), (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(src->expectedShape(WeightRole::kGateUp), (std::vector<int64_t>{256, 128}));
  EXPECT_FALSE(src->usesRole(WeightRole::kQ));
  EXPECT_FALSE(src->usesRole(WeightRole::kUp));
  EXPECT_TRUE(src->usesRole(WeightRole::kGateUp));
}

// A layer tensor the config's graph does not read (attention sinks here) is
// refused by name: running without it would run another model.
TEST(ModelSourceBadInputTest, UnusedLayerTensorIsRefused) {
  testing::TempDir dir;
  std::string path = dir.file("qwen3.gguf");
  ASSERT_TRUE(tinyQwen3(/*with_norms=*/true, "attn_sinks.weight").writeFile(path).ok());
  auto src = ModelSource::open(path, OpenMode::kHeaderOnly);
  ASSERT_TRUE(src.ok()) << src.error().message;
  EXPECT_EQ(src->checkWeights().error().message,
            path + ": tensor 'blk.0.attn_sinks.weight' is not part of the qwen3 graph kiln builds for this "
                   "config; running without it would compute another model");
}

TEST(ModelSourceBadInputTest, Paths) {
  EXPECT_EQ(ModelSource::open("/nonexistent/m.gguf", OpenMode::kHeaderOnly).error().message,
            "/nonexistent/m.gguf: no such file or directory");
  testing::TempDir dir;
  EXPECT_EQ(ModelSource::open(dir.path(), OpenMode::kHeaderOnly).error().message,
            dir.path() + ": checkpoint directory has no config.json");
}

// A 1-layer qwen2 checkpoint with q/k/v biases, written with data.
TEST(ModelSourceTest, HfCheckpointWithBiases) {
  testing::TempDir dir;
  std::ofstream(dir.file("config.json")) << R"({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 20, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16"})";
  testing::SafetensorsWriter w;
  auto bf16 = ElementType::BF16;
  w.addTensorFilled("model.embed_tokens.weight", bf16, {20, 32});
  w.addTensorFilled("model.layers.0.input_layernorm.weight", bf16, {32});
  w.addTensorFilled("model.layers.0.self_attn.q_proj.weight", bf16, {32, 32});
  w.addTensorFilled("model.layers.0.self_attn.q_proj.bias", bf16, {32});
  w.addTensorFilled("model.layers.0.self_attn.k_proj.weight", bf16, {16, 32});
  w.addTensorFilled("model.layers.0.self_attn.k_proj.bias", bf16, {16});
  w.addTensorFilled("model.layers.0.self_attn.v_proj.weight", bf16, {16, 32});
  w.addTensorFilled("model.layers.0.self_attn.v_proj.bias", bf16, {16});
  w.addTensorFilled("model.layers.0.self_attn.o_proj.weight", bf16, {32, 32});
  w.addTensorFilled("model.layers.0.post_attention_layernorm.weight", bf16, {32});
  w.addTensorFilled("model.layers.0.mlp.gate_proj.weight", bf16, {48, 32});
  w.addTensorFilled("model.layers.0.mlp.up_proj.weight", bf16, {48, 32});
  w.addTensorFilled("model.layers.0.mlp.down_proj.weight", bf16, {32, 48});
  w.addTensorFilled("model.norm.weight", bf16, {32});
  ASSERT_TRUE(w.writeFile(dir.file("model.safetensors")).ok());

  auto src = ModelSource::open(dir.path(), OpenMode::kWithData);
  ASSERT_TRUE(src.ok()) << src.error().message;
  EXPECT_EQ(src->format(), ModelSource::Format::kSafetensors);
  EXPECT_EQ(src->gguf(), nullptr);
  EXPECT_TRUE(src->config().attention_bias);
  ASSERT_TRUE(src->checkWeights().ok()) << src->checkWeights().error().message;
  EXPECT_EQ(src->weightName(WeightRole::kVBias, 0), "model.layers.0.self_attn.v_proj.bias");
  EXPECT_EQ(src->weightName(WeightRole::kAttnNorm, 0), "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(src->weightName(WeightRole::kLmHead), "model.embed_tokens.weight");
  EXPECT_EQ(src->weight(WeightRole::kKBias, 0)->shape, (std::vector<int64_t>{16}));
  auto data = src->weightData(WeightRole::kGate, 0);
  ASSERT_TRUE(data.ok()) << data.error().message;
  EXPECT_EQ(data->size(), 48u * 32 * 2);
}

// A 1-layer Gemma 3 language model's tensors under `decoder` (hidden 32, 2
// heads / 1 KV head of 16, ffn 48, vocab 20), with a vision tower's and a
// projector's beside them.
testing::SafetensorsWriter gemma3ImageText(const std::string& decoder, const std::string& vision,
                                           const std::string& head = "") {
  testing::SafetensorsWriter w;
  auto f32 = ElementType::F32;
  w.addTensorFilled(decoder + "embed_tokens.weight", f32, {20, 32});
  const std::string p = decoder + "layers.0.";
  for (const char* norm : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                           "post_feedforward_layernorm"})
    w.addTensorFilled(p + norm + ".weight", f32, {32});
  w.addTensorFilled(p + "self_attn.q_proj.weight", f32, {32, 32});
  w.addTensorFilled(p + "self_attn.k_proj.weight", f32, {16, 32});
  w.addTensorFilled(p + "self_attn.v_proj.weight", f32, {16, 32});
  w.addTensorFilled(p + "self_attn.q_norm.weight", f32, {16});
  w.addTensorFilled(p + "self_attn.k_norm.weight", f32, {16});
  w.addTensorFilled(p + "self_attn.o_proj.weight", f32, {32, 32});
  w.addTensorFilled(p + "mlp.gate_proj.weight", f32, {48, 32});
  w.addTensorFilled(p + "mlp.up_proj.weight", f32, {48, 32});
  w.addTensorFilled(p + "mlp.down_proj.weight", f32, {32, 48});
  w.addTensorFilled(decoder + "norm.weight", f32, {32});
  if (!head.empty()) w.addTensorFilled(head, f32, {20, 32});
  w.addTensorFilled(vision + "vision_tower.vision_model.post_layernorm.weight", f32, {8});
  w.addTensorFilled(vision + "vision_tower.vision_model.encoder.layers.0.self_attn.q_proj.weight", f32, {8, 8});
  w.addTensorFilled(vision + "multi_modal_projector.mm_input_projection_weight", f32, {8, 32});
  return w;
}

void writeGemma3ImageTextConfig(const std::string& dir, bool tied) {
  std::ofstream(dir + "/config.json") << R"({"architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3", "torch_dtype": "float32", "vision_config": {"hidden_size": 8},
    "text_config": {"model_type": "gemma3_text", "hidden_size": 32, "intermediate_size": 48,
      "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
      "vocab_size": 20, "tie_word_embeddings": )"
                                      << (tied ? "true" : "false") << "}}";
}

// Gemma3ForConditionalGeneration's language model, as transformers >= 4.52
// saves it (model.language_model.*, lm_head) and as earlier versions and the
// Hub's Gemma 3 checkpoints do (language_model.model.*, language_model.lm_head);
// the vision tensors are left out with a notice.
TEST(ModelSourceTest, Gemma3ImageTextLanguageModel) {
  testing::TempDir dir;
  writeGemma3ImageTextConfig(dir.path(), /*tied=*/true);
  ASSERT_TRUE(gemma3ImageText("model.language_model.", "model.").writeFile(dir.file("model.safetensors")).ok());
  auto src = ModelSource::open(dir.path(), OpenMode::kHeaderOnly);
  ASSERT_TRUE(src.ok()) << src.error().message;
  EXPECT_TRUE(src->config().image_text_model);
  ASSERT_TRUE(src->checkWeights().ok()) << src->checkWeights().error().message;
  EXPECT_EQ(src->weightName(WeightRole::kTokenEmbedding), "model.language_model.embed_tokens.weight");
  EXPECT_EQ(src->weightName(WeightRole::kFfnNorm, 0), "model.language_model.layers.0.pre_feedforward_layernorm.weight");
  EXPECT_EQ(src->weightName(WeightRole::kFinalNorm), "model.language_model.norm.weight");
  EXPECT_EQ(src->weightName(WeightRole::kLmHead), "model.language_model.embed_tokens.weight");  // tied
  ASSERT_EQ(src->notices().size(), 1u);
  EXPECT_EQ(src->notices()[0], dir.path() + ": gemma3 (image-text): importing the language model "
                                            "(model.language_model.*) only; 3 vision tower and projector tensors "
                                            "left out, so the model takes text, not images");

  testing::TempDir legacy;
  writeGemma3ImageTextConfig(legacy.path(), /*tied=*/false);
  ASSERT_TRUE(gemma3ImageText("language_model.model.", "", "language_model.lm_head.weight")
                  .writeFile(legacy.file("model.safetensors"))
                  .ok());
  src = ModelSource::open(legacy.path(), OpenMode::kHeaderOnly);
  ASSERT_TRUE(src.ok()) << src.error().message;
  ASSERT_TRUE(src->checkWeights().ok()) << src->checkWeights().error().message;
  EXPECT_EQ(src->weightName(WeightRole::kQ, 0), "language_model.model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(src->weightName(WeightRole::kLmHead), "language_model.lm_head.weight");
}

// The text model's tensors under neither prefix (here the text-only
// names), or a layer tensor the graph does not read, are refused by name.
TEST(ModelSourceBadInputTest, Gemma3ImageTextWithoutItsLanguageModel) {
  testing::TempDir dir;
  writeGemma3ImageTextConfig(dir.path(), /*tied=*/true);
  ASSERT_TRUE(gemma3ImageText("model.", "").writeFile(dir.file("model.safetensors")).ok());
  EXPECT_EQ(ModelSource::open(dir.path(), OpenMode::kHeaderOnly).error().message,
            dir.path() + ": a Gemma 3 image-text checkpoint (model_type gemma3) with no tensor "
                         "'language_model.model.embed_tokens.weight' or 'model.language_model.embed_tokens.weight'; "
                         "expected its language model under one of these prefixes");
  auto extra = gemma3ImageText("language_model.model.", "");
  extra.addTensorFilled("language_model.model.layers.0.self_attn.sinks", ElementType::F32, {2});
  ASSERT_TRUE(extra.writeFile(dir.file("model.safetensors")).ok());
  auto src = ModelSource::open(dir.path(), OpenMode::kHeaderOnly);
  ASSERT_TRUE(src.ok()) << src.error().message;
  EXPECT_EQ(src->checkWeights().error().message,
            dir.path() + ": tensor 'language_model.model.layers.0.self_attn.sinks' is not part of the gemma3 graph "
                         "kiln builds for this config; running without it would compute another model");
}

// llama.cpp's gemma3 names: ffn_norm is the pre-feed-forward norm,
// post_attention_norm and post_ffw_norm the sandwich norms.
TEST(ModelSourceTest, Gemma3GgufNames) {
  testing::GgufWriter w;
  w.addString("general.architecture", "gemma3")
      .addUInt32("gemma3.block_count", 1)
      .addUInt32("gemma3.context_length", 256)
      .addUInt32("gemma3.embedding_length", 32)
      .addUInt32("gemma3.feed_forward_length", 48)
      .addUInt32("gemma3.attention.head_count", 2)
      .addUInt32("gemma3.attention.head_count_kv", 1)
      .addUInt32("gemma3.attention.key_length", 16)
      .addUInt32("gemma3.attention.value_length", 16)
      .addUInt32("gemma3.attention.sliding_window", 8)
      .addFloat32("gemma3.attention.layer_norm_rms_epsilon", 1e-6f);
  w.addTensorFilled("token_embd.weight", {20, 32}, ElementType::F16);
  for (const char* norm : {"attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"})
    w.addTensorFilled(std::string("blk.0.") + norm + ".weight", {32}, ElementType::F32);
  w.addTensorFilled("blk.0.attn_q.weight", {32, 32}, ElementType::F16);
  w.addTensorFilled("blk.0.attn_k.weight", {16, 32}, ElementType::F16);
  w.addTensorFilled("blk.0.attn_v.weight", {16, 32}, ElementType::F16);
  w.addTensorFilled("blk.0.attn_q_norm.weight", {16}, ElementType::F32);
  w.addTensorFilled("blk.0.attn_k_norm.weight", {16}, ElementType::F32);
  w.addTensorFilled("blk.0.attn_output.weight", {32, 32}, ElementType::F16);
  w.addTensorFilled("blk.0.ffn_gate.weight", {48, 32}, ElementType::F16);
  w.addTensorFilled("blk.0.ffn_up.weight", {48, 32}, ElementType::F16);
  w.addTensorFilled("blk.0.ffn_down.weight", {32, 48}, ElementType::F16);
  w.addTensorFilled("output_norm.weight", {32}, ElementType::F32);
  testing::TempDir dir;
  const std::string path = dir.file("gemma3.gguf");
  ASSERT_TRUE(w.writeFile(path).ok());
  auto src = ModelSource::open(path, OpenMode::kHeaderOnly);
  ASSERT_TRUE(src.ok()) << src.error().message;
  ASSERT_TRUE(src->checkWeights().ok()) << src->checkWeights().error().message;
  EXPECT_EQ(src->weightName(WeightRole::kFfnNorm, 0), "blk.0.ffn_norm.weight");
  EXPECT_EQ(src->weightName(WeightRole::kAttnPostNorm, 0), "blk.0.post_attention_norm.weight");
  EXPECT_EQ(src->weightName(WeightRole::kFfnPostNorm, 0), "blk.0.post_ffw_norm.weight");
  EXPECT_EQ(src->weightName(WeightRole::kLmHead), "token_embd.weight");
  EXPECT_TRUE(src->notices().empty());
}

TEST(ModelSourceTest, Llama3_8B_HeaderOnly) {
  auto src = ModelSource::open(kFixtures + "/llama3-8b", OpenMode::kHeaderOnly);
  ASSERT_TRUE(src.ok()) << src.error().message;
  ASSERT_TRUE(src->checkWeights().ok()) << src->checkWeights().error().message;
  EXPECT_EQ(src->checkpoint()->shards().size(), 4u);
  EXPECT_EQ(src->tensors().size(), 2u + 32 * 9 + 1);
  uint64_t total = 0;
  for (const TensorInfo& t : src->tensors()) {
    EXPECT_EQ(t.type, ElementType::BF16) << t.name;
    total += t.size_bytes;
  }
  EXPECT_EQ(total, 16060522496u);  // total_size in the real repo's index
  EXPECT_EQ(src->weight(WeightRole::kK, 31)->shape, (std::vector<int64_t>{1024, 4096}));
  EXPECT_EQ(src->weight(WeightRole::kDown, 0)->shape, (std::vector<int64_t>{4096, 14336}));
  EXPECT_EQ(src->weight(WeightRole::kLmHead)->name, "lm_head.weight");
  EXPECT_EQ(src->weight(WeightRole::kLmHead)->shape, (std::vector<int64_t>{128256, 4096}));
  EXPECT_FALSE(src->weightData(WeightRole::kQ, 0).ok());  // no data in header-only mode
  EXPECT_FALSE(ModelSource::open(kFixtures + "/llama3-8b", OpenMode::kWithData).ok());
}

TEST(ModelSourceTest, Llama32_1B_HeaderOnly) {
  auto src = ModelSource::open(kFixtures + "/llama3.2-1b", OpenMode::kHeaderOnly);
  ASSERT_TRUE(src.ok()) << src.error().message;
  ASSERT_TRUE(src->checkWeights().ok()) << src->checkWeights().error().message;
  EXPECT_EQ(src->checkpoint()->shards().size(), 1u);
  EXPECT_EQ(src->tensors().size(), 1u + 16 * 9 + 1);
  EXPECT_EQ(src->findTensor("lm_head.weight"), nullptr);
  EXPECT_EQ(src->weight(WeightRole::kLmHead)->name, "model.embed_tokens.weight");
  EXPECT_EQ(src->weight(WeightRole::kQ, 15)->shape, (std::vector<int64_t>{2048, 2048}));
  EXPECT_EQ(src->weight(WeightRole::kV, 15)->shape, (std::vector<int64_t>{512, 2048}));
}

TEST(ModelSourceRealModelTest, SmolLM2) {
  const std::string path = testing::smollm2GgufPath();
  KILN_REQUIRE_MODEL_FILE(path);
  auto src = ModelSource::open(path, OpenMode::kWithData);
  ASSERT_TRUE(src.ok()) << src.error().message;
  ASSERT_TRUE(src->checkWeights().ok()) << src->checkWeights().error().message;
  EXPECT_EQ(src->tensors().size(), 272u);
  EXPECT_EQ(src->weight(WeightRole::kLmHead)->name, "token_embd.weight");
  const TensorInfo* k = src->weight(WeightRole::kK, 29);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->type, ElementType::Q4_1);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{192, 576}));  // gguf ne [576, 192]
  auto data = src->weightData(WeightRole::kTokenEmbedding);
  ASSERT_TRUE(data.ok()) << data.error().message;
  EXPECT_EQ(data->size(), 30081024u);
}

}  // namespace
}  // namespace kiln::formats
