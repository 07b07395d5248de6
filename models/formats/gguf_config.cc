// ModelConfig from GGUF metadata: general.architecture and llama.cpp's
// <arch>.* keys, read as llama.cpp's loader (src/llama-model.cpp) reads them.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "models/formats/error_text.h"
#include "models/formats/gguf_file.h"
#include "models/formats/model_config.h"
#include "models/formats/result_assign.h"

namespace kiln::formats {
namespace {

constexpr std::string_view kSupportedGgufArchitectures = "llama, mistral, qwen2, qwen3, phi3, qwen3moe, gemma3";
// Far above any real model's; bounds the per-layer table a hostile file can ask for.
constexpr int64_t kMaxLayers = 1 << 16;

// kiln's name for a llama.cpp general.architecture it reads. llama.cpp
// spells Qwen3-MoE qwen3moe; Mixtral is llama with experts.
std::optional<std::string_view> kilnArchitecture(std::string_view gguf_arch) {
  for (std::string_view same : {"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma3"})
    if (gguf_arch == same) return same;
  if (gguf_arch == "qwen3moe") return "qwen3_moe";
  return std::nullopt;
}

// llama.cpp's gemma3 (convert_hf_to_gguf.py's Gemma3Model, the gemma3
// hparams in src/llama-model.cpp, the graph in src/models/gemma3.cpp):
// - The converter adds 1 to every tensor whose name ends in "norm.weight"
//   (Gemma3RMSNorm's 1 + w), so a GGUF's norms scale by w as stored:
//   norm_weight_offset stays 0. Q and K are not permuted (gemma3 rotates
//   NEOX halves, as transformers does; only the llama converter permutes).
// - Sliding layers: with attention.sliding_window > 0, layer i slides unless
//   it is an attention.sliding_window_pattern-th one (default 6: i % 6 < 5
//   slides; 0: all slide), or as a per-layer bool array says; they rotate
//   with rope.freq_base_swa (default 10000), unscaled, the global layers with
//   rope.freq_base and the rope scaling. Without a window every layer is
//   global.
// - A GGUF carries no query_pre_attn_scalar: llama.cpp scales q by
//   1/sqrt(key_length), except for the 62-layer 27B model, whose
//   query_pre_attn_scalar is hidden / heads (168): 1/sqrt(hidden / heads).
// - Embeddings times sqrt(hidden), GeGLU with the tanh GELU, the sandwich
//   norms and per-head q/k norms, as the Hugging Face model.
Status readGemma3(const GgufFile& file, const std::string& a, ModelConfig& c) {
  c.mlp_activation = MlpActivation::kGeluTanh;
  c.sandwich_norms = true;
  c.qk_norm = true;
  c.norm_weight_offset = 0.0;
  c.embedding_scale = std::sqrt(double(c.hidden_size));
  const bool gemma3_27b = c.num_layers == 62;
  if (gemma3_27b && c.num_heads > 0)
    c.attention_scale = 1.0 / std::sqrt(double(c.hidden_size / c.num_heads));
  else
    c.attention_scale = 1.0 / std::sqrt(double(c.head_dim));
  const std::string softcap = a + "final_logit_softcapping";
  if (file.find(softcap) != nullptr) {
    double cap = 0;
    KILN_ASSIGN(cap, file.getFloat(softcap));
    if (cap != 0)
      return makeError("{}: metadata '{}' is {}, which kiln does not implement", file.path(), softcap, cap);
  }
  c.sliding_layers.clear();
  if (c.sliding_window <= 0) {
    c.sliding_window = 0;
    return Status::success();
  }
  if (c.num_layers <= 0 || c.num_layers > kMaxLayers)
    return makeError("{}: metadata '{}block_count' is {}, expected 1 to {}", file.path(), a, c.num_layers, kMaxLayers);
  c.sliding_layers.assign(size_t(c.num_layers), false);
  const std::string pattern_key = a + "attention.sliding_window_pattern";
  const GgufValue* pattern = file.find(pattern_key);
  if (pattern != nullptr && pattern->type == GgufValueType::kArray) {
    if (pattern->array_type != GgufValueType::kBool || int64_t(pattern->array_size) != c.num_layers)
      return makeError("{}: metadata '{}' is {} of {}, expected an integer period or array[bool] of one entry a "
                       "layer ({})",
                       file.path(), pattern_key, pattern->typeName(), pattern->array_size, c.num_layers);
    for (int64_t i = 0; i < c.num_layers; ++i) c.sliding_layers[size_t(i)] = pattern->array_bytes[size_t(i)] != 0;
  } else {
    int64_t period = 6;
    if (pattern != nullptr) KILN_ASSIGN(period, file.getInt(pattern_key));
    if (period < 0)
      return makeError("{}: metadata '{}' is {}, expected a period of 0 or more", file.path(), pattern_key, period);
    for (int64_t i = 0; i < c.num_layers; ++i) c.sliding_layers[size_t(i)] = period == 0 || i % period < period - 1;
  }
  c.rope_local_theta = 10000.0;
  if (file.find(a + "rope.freq_base_swa") != nullptr) KILN_ASSIGN(c.rope_local_theta, file.getFloat(a + "rope.freq_base_swa"));
  if (std::find(c.sliding_layers.begin(), c.sliding_layers.end(), true) == c.sliding_layers.end()) {
    c.sliding_window = 0;
    c.sliding_layers.clear();
  }
  return Status::success();
}

}  // namespace

Result<ModelConfig> configFromGguf(const GgufFile& file) {
  ModelConfig c;
  c.source = file.path();
  std::string gguf_arch;
  KILN_ASSIGN(gguf_arch, file.getString("general.architecture"));
  std::optional<std::string_view> arch = kilnArchitecture(gguf_arch);
  if (!arch)
    return makeError("{}: general.architecture '{}' is not supported; supported: {}", file.path(),
                     printable(gguf_arch), kSupportedGgufArchitectures);
  c.architecture = std::string(*arch);
  const std::string a = gguf_arch + ".";
  auto optInt = [&](const std::string& key, int64_t fallback) -> Result<int64_t> {
    if (file.find(key) == nullptr) return fallback;
    return file.getInt(key);
  };
  KILN_ASSIGN(c.num_layers, file.getInt(a + "block_count"));
  KILN_ASSIGN(c.hidden_size, file.getInt(a + "embedding_length"));
  KILN_ASSIGN(c.intermediate_size, file.getInt(a + "feed_forward_length"));
  KILN_ASSIGN(c.num_heads, file.getInt(a + "attention.head_count"));
  KILN_ASSIGN(c.max_position_embeddings, file.getInt(a + "context_length"));
  KILN_ASSIGN(c.num_kv_heads, optInt(a + "attention.head_count_kv", c.num_heads));
  int64_t default_head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
  KILN_ASSIGN(c.head_dim, optInt(a + "attention.key_length", default_head_dim));
  int64_t value_dim = 0;
  KILN_ASSIGN(value_dim, optInt(a + "attention.value_length", c.head_dim));
  if (value_dim != c.head_dim)
    return makeError("{}: metadata '{}attention.value_length' is {}, kiln needs it equal to key_length {}",
                     file.path(), printable(a), value_dim, c.head_dim);
  KILN_ASSIGN(c.rms_norm_eps, file.getFloat(a + "attention.layer_norm_rms_epsilon"));
  if (file.find(a + "rope.freq_base") != nullptr)
    KILN_ASSIGN(c.rope_theta, file.getFloat(a + "rope.freq_base"));
  KILN_ASSIGN(c.sliding_window, optInt(a + "attention.sliding_window", 0));

  // Vocabulary: the explicit key, else the embedding's rows, else the token list.
  const TensorInfo* embd = file.findTensor("token_embd.weight");
  if (file.find(a + "vocab_size") != nullptr) {
    KILN_ASSIGN(c.vocab_size, file.getInt(a + "vocab_size"));
  } else if (embd != nullptr && embd->shape.size() == 2) {
    c.vocab_size = embd->shape[0];
  } else if (const GgufValue* tokens = file.find("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<int64_t>(tokens->array_size);
  } else {
    return makeError("{}: no {}vocab_size, token_embd.weight or tokenizer.ggml.tokens to give "
                     "the vocabulary size",
                     file.path(), a);
  }

  if (file.find(a + "rope.scaling.type") != nullptr) {
    std::string type;
    KILN_ASSIGN(type, file.getString(a + "rope.scaling.type"));
    if (type == "linear") {
      c.rope_scaling.kind = RopeScaling::Kind::kLinear;
      KILN_ASSIGN(c.rope_scaling.factor, file.getFloat(a + "rope.scaling.factor"));
    } else if (type != "none") {
      return makeError("{}: metadata '{}rope.scaling.type' is '{}', supported: none, linear",
                       file.path(), printable(a), printable(type));
    }
  }
  // llama.cpp permutes llama Q/K rows into adjacent pairs; qwen2 and qwen3 keep neox.
  // phi3 is neox as well.
  const bool neox = c.architecture == "qwen2" || c.architecture == "qwen3" || c.architecture == "qwen3_moe" ||
                    c.architecture == "phi3" || c.architecture == "gemma3";
  c.rope_style = neox ? RopeStyle::kHalf : RopeStyle::kInterleaved;
  c.tie_word_embeddings = file.findTensor("output.weight") == nullptr;
  c.attention_bias = file.findTensor("blk.0.attn_q.bias") != nullptr;
  c.output_bias = file.findTensor("blk.0.attn_output.bias") != nullptr;
  c.qk_norm = c.architecture == "qwen3" || c.architecture == "qwen3_moe";
  if (c.architecture == "gemma3") KILN_RETURN_IF_ERROR(readGemma3(file, a, c));
  // Experts, stacked [E, ...] per layer (ffn_gate_inp, ffn_{gate,up,down}_exps);
  // llama.cpp renormalizes the top-k weights of both Mixtral and Qwen3-MoE
  // unless expert_weights_norm says otherwise.
  KILN_ASSIGN(c.num_experts, optInt(a + "expert_count", 0));
  if (c.num_experts > 0) {
    KILN_ASSIGN(c.experts_per_token, file.getInt(a + "expert_used_count"));
    KILN_ASSIGN(c.moe_intermediate_size, optInt(a + "expert_feed_forward_length", c.intermediate_size));
    c.norm_topk_prob = true;
    if (file.find(a + "expert_weights_norm") != nullptr) KILN_ASSIGN(c.norm_topk_prob, file.getBool(a + "expert_weights_norm"));
    for (const char* shared : {"expert_shared_count", "expert_shared_feed_forward_length", "expert_group_count"}) {
      if (file.find(a + shared) == nullptr) continue;
      int64_t n = 0;
      KILN_ASSIGN(n, file.getInt(a + shared));
      if (n > (std::string_view(shared) == "expert_group_count" ? 1 : 0))
        return makeError("{}: metadata '{}{}' is {}, which kiln does not implement", file.path(), printable(a),
                         shared, n);
    }
  }
  // llama.cpp's phi3: fused attn_qkv, and ffn_up holds gate and up; its
  // long-context variants carry LongRoPE factors kiln does not implement.
  c.fused_qkv = c.fused_gate_up = c.architecture == "phi3";
  for (const char* factors : {"rope_factors_long.weight", "rope_factors_short.weight"})
    if (file.findTensor(factors) != nullptr)
      return makeError("{}: tensor '{}' asks for LongRoPE scaling, which kiln does not implement", file.path(),
                       factors);
  const TensorInfo* q = file.findTensor(c.fused_qkv ? "blk.0.attn_qkv.weight" : "blk.0.attn_q.weight");
  c.weight_dtype = q != nullptr ? q->type : embd != nullptr ? embd->type : ElementType::F32;

  KILN_RETURN_IF_ERROR(c.validate());
  return c;
}

}  // namespace kiln::formats
