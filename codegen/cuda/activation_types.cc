#include "codegen/cuda/activation_types.h"

#include <string>

namespace kiln::cuda_codegen {

const ActivationTypeParams& activationTypeParams(std::string_view kind) {
  // Args in the manifest's order: rope_kv_append (qkv | q, k, v, positions,
  // ...), paged_attention (q, k_pool, ...), silu_mul (gate_up | gate, up).
  static const ActivationTypeParams kEmbedding{{}, {"out_type"}};
  static const ActivationTypeParams kRmsNorm{{"x_type"}, {"out_type"}};
  static const ActivationTypeParams kResidualRmsNorm{{"x_type", "residual_type"}, {"out_type", "sum_type"}};
  static const ActivationTypeParams kElementwise{{"a_type", "b_type"}, {"out_type"}};
  static const ActivationTypeParams kGather{{"type"}, {"type"}};
  static const ActivationTypeParams kRope{{"x_type", "x_type", "x_type"}, {"out_type"}};
  static const ActivationTypeParams kAttention{{"q_type"}, {"out_type"}};
  static const ActivationTypeParams kSiluMul{{"x_type", "x_type"}, {"out_type"}};
  static const ActivationTypeParams kCombine{{}, {"out_type"}};
  static const ActivationTypeParams kLogits{{"logits_type"}, {}};
  // moe_router: x -> (weights, ids); the experts: (x, weights, ids, ...) -> y.
  // The i32 expert ids are no activation.
  static const ActivationTypeParams kMoeRouter{{"x_type"}, {nullptr, "out_type"}};
  static const ActivationTypeParams kMoeExperts{{"x_type", "out_type"}, {"out_type"}};
  // The state-space steps (args in the manifest's order; the weights,
  // pools and inputs between them are no activations): ssm_conv1d (x, pool,
  // w, ...), selective_scan (x, dt, a_log, b, c, ...), ssd_scan (x, dt,
  // dt_bias, a_log, b, c, ...), ssm_gated_norm (x, gate, w); kv_append
  // (k, v, ...) writes the pools alone.
  static const ActivationTypeParams kSsmConv{{"x_type"}, {"out_type"}};
  static const ActivationTypeParams kSelectiveScan{{"x_type", "x_type", nullptr, "x_type", "x_type"}, {"out_type"}};
  static const ActivationTypeParams kSsdScan{{"x_type", "x_type", nullptr, nullptr, "x_type", "x_type"}, {"out_type"}};
  static const ActivationTypeParams kGatedNorm{{"x_type", "x_type"}, {"out_type"}};
  static const ActivationTypeParams kKvAppend{{"x_type", "x_type"}, {}};
  static const ActivationTypeParams kNone;
  if (kind == "embedding") return kEmbedding;
  if (kind == "rms_norm") return kRmsNorm;
  if (kind == "residual_rms_norm") return kResidualRmsNorm;
  if (kind == "add" || kind == "mul" || kind == "silu" || kind == "relu_squared") return kElementwise;
  if (kind == "ssm_conv1d") return kSsmConv;
  if (kind == "selective_scan") return kSelectiveScan;
  if (kind == "ssd_scan") return kSsdScan;
  if (kind == "ssm_gated_norm") return kGatedNorm;
  if (kind == "kv_append") return kKvAppend;
  if (kind == "gather_last_tokens") return kGather;
  if (kind == "rope_kv_append") return kRope;
  if (kind == "paged_attention" || kind == "paged_attention_split") return kAttention;
  if (kind == "silu_mul") return kSiluMul;
  if (kind == "attention_combine") return kCombine;
  if (kind == "argmax" || kind == "sample") return kLogits;
  if (kind == "moe_router") return kMoeRouter;
  if (kind == "moe_ffn" || kind == "moe_gate_up" || kind == "moe_down" || kind == "moe_combine" ||
      kind == "moe_gate_up_mma" || kind == "moe_down_mma")
    return kMoeExperts;
  return kNone;
}

nlohmann::json withActivationTypes(std::string_view kind, nlohmann::json params, std::string_view activation_type) {
  if (activation_type == "bf16" || !params.is_object()) return params;
  const ActivationTypeParams& typed = activationTypeParams(kind);
  for (const std::vector<const char*>* names : {&typed.args, &typed.results_from_last})
    for (const char* name : *names)
      if (name && !params.contains(name)) params[name] = std::string(activation_type);
  return params;
}

}  // namespace kiln::cuda_codegen
