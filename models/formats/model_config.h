// One description of a Llama-family decoder (llama, mistral, qwen2, qwen3, phi3, gemma3, and the
// mixture-of-experts mixtral and qwen3_moe), read
// from a Hugging Face config.json or from GGUF metadata, so the importer and
// the runtime never look at either format's keys directly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "models/formats/tensor_info.h"
#include "runtime/support/error.h"

namespace kiln::formats {

class GgufFile;

// Rotary embedding pair layout inside each head of Q and K.
enum class RopeStyle {
  // HF rotate_half ("neox"): element i pairs with i + head_dim/2.
  kHalf,
  // Adjacent pairs (2i, 2i+1). llama.cpp's converter permutes the Q/K rows of
  // llama GGUFs so they use this layout; HF checkpoints never do.
  kInterleaved,
};

struct RopeScaling {
  enum class Kind { kNone, kLinear, kLlama3 };
  Kind kind = Kind::kNone;
  double factor = 1.0;
  // llama3 only: wavelengths above original_max/low_freq_factor are divided
  // by `factor`, below original_max/high_freq_factor kept, smoothed between.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
};

// The gated MLP's activation: down(act(gate) · up).
enum class MlpActivation {
  kSilu,      // SwiGLU (Llama ...)
  kGeluTanh,  // GeGLU with PyTorch's tanh-approximated GELU (gemma3's gelu_pytorch_tanh)
};

struct ModelConfig {
  std::string architecture;  // llama | mistral | qwen2 | qwen3 | phi3 | gemma3 | mixtral | qwen3_moe (SmolLM uses llama)
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // < num_heads for grouped-query attention
  int64_t head_dim = 0;  // qwen3: from the config, num_heads * head_dim may differ from hidden_size
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  RopeStyle rope_style = RopeStyle::kHalf;
  bool tie_word_embeddings = false;  // lm_head shares the token embedding
  bool attention_bias = false;       // q/k/v projections carry biases (qwen2; llama/qwen3 attention_bias)
  bool output_bias = false;          // o_proj carries a bias (llama/qwen3 attention_bias)
  bool qk_norm = false;              // qwen3: RMSNorm over each head of q and k (weights [head_dim]) before RoPE
  // phi3: the checkpoint stores q/k/v as one qkv_proj [(H + 2 Hkv) D, hidden]
  // and gate/up as one gate_up_proj [2 F, hidden] (gate rows first).
  bool fused_qkv = false;
  bool fused_gate_up = false;
  // Sliding-window attention: a query at position p sees keys (p - W, p].
  // sliding_window is W for the layers that slide (0: none does);
  // sliding_layers marks them, one entry per layer (empty: every layer
  // slides when sliding_window > 0, as Mistral's).
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;
  // gemma3: sliding layers rotate with their own theta and no scaling
  // (rope_local_base_freq); 0: every layer uses rope_theta and rope_scaling.
  double rope_local_theta = 0.0;
  MlpActivation mlp_activation = MlpActivation::kSilu;
  // gemma3's sandwich norms: post_attention_layernorm normalizes the
  // attention output and post_feedforward_layernorm the MLP output before
  // each residual add; pre_feedforward_layernorm is the FFN input norm.
  bool sandwich_norms = false;
  // Every RMSNorm scales by (norm_weight_offset + w) in f32 (gemma3: 1).
  double norm_weight_offset = 0.0;
  // The embedding rows are multiplied by this (gemma3: sqrt(hidden_size),
  // rounded to the table's type).
  double embedding_scale = 1.0;
  // Attention logits scale; 0: 1/sqrt(head_dim) (gemma3: query_pre_attn_scalar^-0.5).
  double attention_scale = 0.0;
  // Mixture of experts (mixtral, qwen3_moe): num_experts > 0. An MoE
  // layer's FFN sends each token to the experts_per_token experts of highest
  // softmax router probability, each a SwiGLU MLP of moe_intermediate_size,
  // and sums their outputs weighted by those probabilities (renormalized to
  // sum 1 when norm_topk_prob). moe_layers marks the MoE layers (empty: all
  // of them); the others have the dense MLP of intermediate_size
  // (Qwen3-MoE's mlp_only_layers and decoder_sparse_step).
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = true;
  std::vector<bool> moe_layers;
  // gemma3's image-text checkpoints (Gemma3ForConditionalGeneration): the
  // config is its text_config; the language model's weights sit under
  // language_model (ModelSource finds which spelling), and the vision tower
  // and projector are left out.
  bool image_text_model = false;
  // Storage type of the big weights (BF16 for a bf16 checkpoint, Q4_1 for a
  // Q4_1 GGUF); a hint for buffer planning, individual tensors may differ.
  ElementType weight_dtype = ElementType::F32;
  // Where the config came from, for error messages.
  std::string source;

  // Checks sizes are positive and consistent (kv heads divide heads, even
  // head_dim, sane rope parameters, one sliding_layers entry per layer).
  Status validate() const;

  // The attention window of `layer`: W, or 0 for full causal attention.
  int64_t windowOf(int64_t layer) const;
  // The rotary theta of `layer`, and whether rope_scaling applies to it.
  double ropeThetaOf(int64_t layer) const;
  bool ropeScaledAt(int64_t layer) const;
  // The attention logits scale (attention_scale, or 1/sqrt(head_dim)).
  double attentionScale() const;
  // Whether `layer`'s FFN is a mixture of experts.
  bool isMoeLayer(int64_t layer) const;
};

std::string_view ropeStyleName(RopeStyle style);             // "half" | "interleaved"
std::string_view ropeScalingKindName(RopeScaling::Kind kind);  // "none" | "linear" | "llama3"
std::string_view mlpActivationName(MlpActivation activation);  // "silu" | "gelu_tanh"

// Reads a Hugging Face config.json. Errors name the file, the field and the
// expected type; an unsupported model_type lists the supported ones.
Result<ModelConfig> parseHfConfig(const std::string& config_json_path);
// Same, from JSON text; `name` stands in for the path in errors.
Result<ModelConfig> parseHfConfigText(std::string_view json_text, const std::string& name);

// Reads general.architecture and llama.cpp's <arch>.* metadata
// (gguf_config.cc), for llama, mistral, qwen2, qwen3, phi3, qwen3moe and
// gemma3. tie_word_embeddings is true when the file has no output.weight.
Result<ModelConfig> configFromGguf(const GgufFile& file);

}  // namespace kiln::formats
