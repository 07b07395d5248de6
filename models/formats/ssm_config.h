// The description of a state-space language model (Mamba, MambaForCausalLM;
// Mamba-2, Mamba2ForCausalLM), read from a Hugging Face config.json, so the
// SSM importer and the runtime never look at the format's keys directly.
//
// Mamba (one layer, I = intermediate_size = expand · hidden, N = state_size,
// R = time_step_rank, K = conv_kernel):
//   x, z   = split(in_proj(rms_norm(h)), [I, I])
//   x      = silu(causal_conv1d(x))                 depthwise over I channels, width K
//   dt,B,C = split(x_proj(x), [R, N, N]);  dt = softplus(dt_proj(dt))   [S, I]
//   s_t    = exp(dt_t · A) ⊙ s_{t-1} + (dt_t · x_t) ⊗ B_t,  A = -exp(A_log) [I, N]
//   y_t    = s_t · C_t + D ⊙ x_t;  out = out_proj(y ⊙ silu(z))
// Mamba-2 (H heads of P = head_dim, G groups of B and C, I = H · P):
//   z, xBC, dt = split(in_proj(rms_norm(h)), [I, I + 2 G N, H])
//   x, B, C    = split(silu(causal_conv1d(xBC)), [I, G N, G N])
//   dt         = clamp(softplus(dt + dt_bias), time_step_limit)           [S, H]
//   s_t[h]     = exp(dt_t[h] · A[h]) s_{t-1}[h] + dt_t[h] x_t[h] ⊗ B_t[g(h)],  A = -exp(A_log) [H]
//   y_t[h]     = s_t[h] · C_t[g(h)] + D[h] x_t[h]
//   out        = out_proj(gated_rms_norm(y, z))   y ⊙ silu(z), normalized over I (transformers' MambaRMSNormGated)
// The state a sequence carries is O(1) in its length: per layer, the last
// K - 1 conv inputs [K-1, conv channels] and the SSM state ([I, N] or [H, P, N]).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "models/formats/tensor_info.h"
#include "runtime/support/error.h"

namespace kiln::formats {

enum class SsmKind {
  kMamba,   // selective scan, per-channel A [I, N]
  kMamba2,  // state-space dual form: scalar A per head, grouped B/C, gated RMSNorm
};

// What a layer of the stack is. Mamba and Mamba-2 models are all kMamba; a
// hybrid (Nemotron-H's hybrid_override_pattern "M*M-": M Mamba-2, * attention,
// - MLP) mixes them, each block x += mixer(rms_norm(x)).
enum class SsmLayerKind { kMamba, kAttention, kMlp };

struct SsmConfig {
  SsmKind kind = SsmKind::kMamba;
  std::string architecture;  // "mamba" | "mamba2" | "nemotron_h"
  std::vector<SsmLayerKind> layer_kinds;  // one per layer
  // Hybrid attention layers: causal GQA without positional encoding
  // (Nemotron-H), scaled by head_dim^-1/2.
  int64_t attn_heads = 0, attn_kv_heads = 0, attn_head_dim = 0;
  // Hybrid MLP layers: down(relu(up(x))²).
  int64_t mlp_intermediate_size = 0;
  // Mamba-2's gated RMSNorm normalizes runs of this many features:
  // intermediate_size (Mamba2ForCausalLM), intermediate_size / n_groups (Nemotron-H).
  int64_t norm_group_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // expand · hidden_size
  int64_t num_layers = 0;
  int64_t vocab_size = 0;
  int64_t state_size = 0;      // N
  int64_t conv_kernel = 0;     // K, the causal depthwise conv's width
  int64_t time_step_rank = 0;  // R (mamba only)
  int64_t num_heads = 0;       // mamba2: H
  int64_t head_dim = 0;        // mamba2: P, H · P = intermediate_size
  int64_t n_groups = 1;        // mamba2: G, groups of B and C; divides H
  int64_t chunk_size = 256;    // mamba2: the SSD chunk length (a schedule choice, not semantics)
  double layer_norm_epsilon = 1e-5;
  // mamba2: dt is clamped to [time_step_min_limit, time_step_max_limit] after softplus.
  double time_step_min_limit = 0.0;
  double time_step_max_limit = std::numeric_limits<double>::infinity();
  bool use_bias = false;       // in_proj / out_proj biases
  bool use_conv_bias = true;
  bool tie_word_embeddings = true;
  ElementType weight_dtype = ElementType::F32;
  std::string source;

  // Channels the causal conv runs over: I (mamba), I + 2 G N (mamba2).
  int64_t convChannels() const;
  // in_proj's output features: 2 I (mamba), 2 I + 2 G N + H (mamba2).
  int64_t inProjFeatures() const;
  // Elements of one sequence's state in one layer.
  int64_t convStateElements() const { return (conv_kernel - 1) * convChannels(); }
  int64_t ssmStateElements() const;

  Status validate() const;
};

std::string_view ssmKindName(SsmKind kind);  // "mamba" | "mamba2"
std::string_view ssmLayerKindName(SsmLayerKind kind);  // "mamba" | "attention" | "mlp"

// Whether config.json text names a state-space model (model_type mamba,
// mamba2 or nemotron_h, or architectures[0] MambaForCausalLM /
// Mamba2ForCausalLM / NemotronHForCausalLM).
bool isSsmConfigText(std::string_view json_text);
// Reads a state-space model's config.json. Fields that change the
// computation in ways kiln does not implement are refused by name.
Result<SsmConfig> parseSsmConfig(const std::string& config_json_path);
Result<SsmConfig> parseSsmConfigText(std::string_view json_text, const std::string& name);

}  // namespace kiln::formats
