#include "models/formats/ssm_config.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kiln::formats {
namespace {

std::string mambaJson(const std::string& extra = "") {
  return R"({"architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 64,
             "num_hidden_layers": 2, "vocab_size": 128, "state_size": 8, "expand": 2, "conv_kernel": 4,
             "time_step_rank": "auto", "torch_dtype": "float32")" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

// Python's json.dumps of Mamba2Config: time_step_limit as [0.0, Infinity].
std::string mamba2Json(const std::string& extra = "") {
  return R"({"architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "hidden_size": 64,
             "num_hidden_layers": 2, "vocab_size": 128, "state_size": 16, "expand": 2, "conv_kernel": 4,
             "num_heads": 8, "head_dim": 16, "n_groups": 2, "chunk_size": 8,
             "time_step_limit": [0.0, Infinity], "torch_dtype": "float32")" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

std::string parseError(const std::string& text) {
  auto c = parseSsmConfigText(text, "c.json");
  if (c.ok()) return "<parsed>";
  EXPECT_EQ(c.error().message.find('\n'), std::string::npos);
  return c.error().message;
}

TEST(SsmConfigTest, MambaDefaultsAndDerivedSizes) {
  auto c = parseSsmConfigText(mambaJson(), "c.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->kind, SsmKind::kMamba);
  EXPECT_EQ(c->intermediate_size, 128);
  EXPECT_EQ(c->time_step_rank, 4);  // ceil(64 / 16)
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->convChannels(), 128);
  EXPECT_EQ(c->inProjFeatures(), 256);
  EXPECT_EQ(c->convStateElements(), 3 * 128);
  EXPECT_EQ(c->ssmStateElements(), 128 * 8);
  EXPECT_EQ(c->weight_dtype, ElementType::F32);
}

TEST(SsmConfigTest, Mamba2GroupsHeadsAndInfiniteLimit) {
  auto c = parseSsmConfigText(mamba2Json(), "c.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->kind, SsmKind::kMamba2);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->convChannels(), 128 + 2 * 2 * 16);
  EXPECT_EQ(c->inProjFeatures(), 128 + 192 + 8);
  EXPECT_EQ(c->ssmStateElements(), 8 * 16 * 16);
  EXPECT_EQ(c->time_step_min_limit, 0.0);
  EXPECT_TRUE(std::isinf(c->time_step_max_limit));
  auto limited = parseSsmConfigText(mamba2Json().replace(mamba2Json().find("[0.0, Infinity]"), 15, "[0.01, 0.2]"),
                                    "c.json");
  ASSERT_TRUE(limited.ok()) << limited.error().message;
  EXPECT_EQ(limited->time_step_max_limit, 0.2);
}

std::string nemotronJson(const std::string& extra = "") {
  return R"({"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 64,
             "num_hidden_layers": 4, "hybrid_override_pattern": "M*M-", "vocab_size": 128,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "mlp_hidden_act": "relu2",
             "intermediate_size": 96, "mamba_num_heads": 8, "mamba_head_dim": 16, "n_groups": 2,
             "ssm_state_size": 16, "conv_kernel": 4, "chunk_size": 8, "time_step_limit": [0.0, Infinity])" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

TEST(SsmConfigTest, NemotronHLayerPatternAndGroupedNorm) {
  auto c = parseSsmConfigText(nemotronJson(), "c.json");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->kind, SsmKind::kMamba2);
  ASSERT_EQ(c->layer_kinds.size(), 4u);
  EXPECT_EQ(c->layer_kinds[0], SsmLayerKind::kMamba);
  EXPECT_EQ(c->layer_kinds[1], SsmLayerKind::kAttention);
  EXPECT_EQ(c->layer_kinds[3], SsmLayerKind::kMlp);
  EXPECT_EQ(c->intermediate_size, 128);  // mamba_num_heads x mamba_head_dim, not intermediate_size (the MLP's)
  EXPECT_EQ(c->mlp_intermediate_size, 96);
  EXPECT_EQ(c->norm_group_size, 64);  // I / n_groups
  EXPECT_EQ(c->attn_head_dim, 16);
  auto listed = parseSsmConfigText(
      nemotronJson(R"("layers_block_type": ["mamba", "attention", "mamba", "mlp"])"), "c.json");
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  EXPECT_EQ(listed->layer_kinds, c->layer_kinds);
  // A Mamba2ForCausalLM normalizes the whole row.
  EXPECT_EQ(parseSsmConfigText(mamba2Json(), "c.json")->norm_group_size, 128);
}

TEST(SsmConfigTest, NemotronHRefusesWhatItDoesNotRun) {
  auto moe = nemotronJson();
  moe.replace(moe.find("\"M*M-\""), 6, "\"M*ME\"");
  EXPECT_NE(parseError(moe).find("layer 3 is 'moe'"), std::string::npos) << parseError(moe);
  EXPECT_NE(parseError(nemotronJson(R"("mlp_hidden_act": "gelu")")).find("'mlp_hidden_act'"), std::string::npos);
  EXPECT_NE(parseError(nemotronJson(R"("attention_bias": true)")).find("'attention_bias'"), std::string::npos);
  EXPECT_NE(parseError(nemotronJson(R"("num_nextn_predict_layers": 1)")).find("'num_nextn_predict_layers'"),
            std::string::npos);
  auto short_pattern = nemotronJson();
  short_pattern.replace(short_pattern.find("\"M*M-\""), 6, "\"M*M\"");
  EXPECT_NE(parseError(short_pattern).find("lists 3 layers"), std::string::npos);
}

TEST(SsmConfigTest, RecognizesSsmConfigsOnly) {
  EXPECT_TRUE(isSsmConfigText(mambaJson()));
  EXPECT_TRUE(isSsmConfigText(mamba2Json()));
  EXPECT_TRUE(isSsmConfigText(R"({"architectures": ["Mamba2ForCausalLM"]})"));
  EXPECT_FALSE(isSsmConfigText(R"({"model_type": "llama"})"));
  EXPECT_FALSE(isSsmConfigText("not json"));
}

TEST(SsmConfigTest, RefusesUnimplementedFieldsByName) {
  EXPECT_NE(parseError(mambaJson(R"("hidden_act": "gelu")")).find("'hidden_act'"), std::string::npos);
  EXPECT_NE(parseError(mambaJson(R"("use_mambapy": true)")).find("'use_mambapy'"), std::string::npos);
  EXPECT_NE(parseError(mambaJson(R"("use_associative_scan": true)")).find("'use_associative_scan'"),
            std::string::npos);
  EXPECT_NE(parseError(mambaJson().replace(mambaJson().find("\"conv_kernel\": 4"), 16, "\"conv_kernel\": 16"))
                .find("'conv_kernel'"),
            std::string::npos);
  EXPECT_NE(parseError(mamba2Json(R"("rms_norm": false)")).find("'rms_norm'"), std::string::npos);
  EXPECT_NE(parseError(mamba2Json(R"("layer_types": ["mamba", "attention"])")).find("'layer_types[1]'"),
            std::string::npos);
  EXPECT_NE(parseError(mamba2Json().replace(mamba2Json().find("\"n_groups\": 2"), 13, "\"n_groups\": 3"))
                .find("'n_groups'"),
            std::string::npos);
  EXPECT_NE(parseError(mamba2Json().replace(mamba2Json().find("\"head_dim\": 16"), 14, "\"head_dim\": 8"))
                .find("head_dim"),
            std::string::npos);
  EXPECT_NE(parseError(mamba2Json().replace(mamba2Json().find("[0.0, Infinity]"), 15, "[0.5, 0.1]"))
                .find("'time_step_limit'"),
            std::string::npos);
  EXPECT_NE(parseError(mambaJson(R"("intermediate_size": 100)")).find("'intermediate_size'"), std::string::npos);
}

}  // namespace
}  // namespace kiln::formats
