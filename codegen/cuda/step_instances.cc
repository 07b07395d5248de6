#include "codegen/cuda/step_instances.h"

#include <fmt/format.h>

#include "codegen/cuda/activation_types.h"
#include "codegen/cuda/instance_source.h"
#include "runtime/artifact/step_params_json.h"

namespace kiln::cuda_codegen {

const char* instanceRoleName(InstanceRole role) {
  switch (role) {
    case InstanceRole::kStep: return "step";
    case InstanceRole::kDecode: return "decode";
    case InstanceRole::kCombine: return "combine";
    case InstanceRole::kPrefill: return "prefill";
    case InstanceRole::kGreedy: return "greedy";
    case InstanceRole::kFused: return "fused";
    case InstanceRole::kSingleRow: return "single_row";
    case InstanceRole::kFusedSingleRow: return "fused_single_row";
    case InstanceRole::kNormOfSum: return "norm_of_sum";
    case InstanceRole::kFusedPrefill: return "fused_prefill";
  }
  return "?";
}

std::string boundedInstanceName(const std::string& name) {
  if (name.size() <= 160) return name;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return fmt::format("{}_{:016x}", name.substr(0, 96), h);
}

bool warpgroupMmaTarget(std::string_view arch) { return arch == "sm_90" || arch == "sm_90a"; }

bool bulkCopyTarget(std::string_view arch) {
  if (arch.substr(0, 3) != "sm_") return false;
  int version = 0;
  for (char c : arch.substr(3)) {
    if (c < '0' || c > '9') break;
    version = version * 10 + (c - '0');
  }
  return version >= 90;
}

StepInstance greedyInstance(int64_t vocab, std::string_view logits_type) {
  const nlohmann::json params{{"vocab", vocab}, {"logits_type", std::string(logits_type)}};
  return {InstanceRole::kGreedy, "argmax", params, boundedInstanceName(instanceName("argmax", params))};
}

namespace {

// attention_combine's params: the partials' heads and head_dim, and the
// output's type where the step names one.
nlohmann::json combineParams(const PagedAttentionParams& attention) {
  nlohmann::json combine{{"heads", attention.attn.heads}, {"head_dim", attention.attn.head_dim}};
  if (!attention.out_type.empty()) combine["out_type"] = attention.out_type;
  return combine;
}

// The instances of an f32 plan's step: each with its activation types
// named (activation_types.h), so under a name of its own, not the manifest's.
// Its GEMMs have none: cuBLASLt runs them in f32 at every batch size, the
// skinny kernels being bf16's. Attention takes the CUDA-core kernels, whose
// q and out follow Config: the step's own and its split mode with the
// combine for decode batches (decode_attention and the tensor-core prefill
// read bf16 queries).
Result<std::vector<StepInstance>> typedStepInstances(const Step& step, std::string_view activation_type) {
  const std::string_view kind = stepKindName(step.kind);
  const nlohmann::json manifest_params = toJson(step.params);
  std::vector<StepInstance> out;
  auto add = [&](InstanceRole role, std::string_view k, const nlohmann::json& manifest) {
    const nlohmann::json p = withActivationTypes(k, manifest, activation_type);
    out.push_back({role, std::string(k), p, boundedInstanceName(instanceName(k, p))});
  };
  if (activation_type != "f32")
    return makeError("{}: activation type '{}' has no CUDA kernels (bf16 or f32)", kind, activation_type);
  if (step.kind == StepKind::kGemm) return out;
  add(InstanceRole::kStep, kind, manifest_params);
  const auto* attention = std::get_if<PagedAttentionParams>(&step.params);
  if (!attention || attention->tree_mask) return out;
  add(InstanceRole::kDecode, "paged_attention_split", manifest_params);
  nlohmann::json combine = combineParams(*attention);
  add(InstanceRole::kCombine, "attention_combine", combine);
  return out;
}

}  // namespace

Result<std::vector<StepInstance>> stepInstances(const Step& step, const StepInstanceOptions& options) {
  const std::string_view kind = stepKindName(step.kind);
  const nlohmann::json params = toJson(step.params);
  const std::string& manifest_instance = step.instance;
  std::vector<StepInstance> out;
  auto add = [&](InstanceRole role, std::string_view k, const nlohmann::json& p, std::string name) {
    out.push_back({role, std::string(k), p, boundedInstanceName(name)});
  };
  if (options.activation_type != "bf16") return typedStepInstances(step, options.activation_type);
  const auto* gemm = std::get_if<GemmParams>(&step.params);
  if (gemm && gemm->weight_type != "bf16") {
    nlohmann::json bf16 = params;
    bf16["weight_type"] = "bf16";
    add(InstanceRole::kStep, kind, bf16, instanceName(kind, bf16));
  } else {
    add(InstanceRole::kStep, kind, params, manifest_instance);
  }
  const bool fused = gemm && options.skinny_fusion.is_object() && !options.skinny_fusion.empty();
  // A gemm's instance for batches of one row: streamed where its shape
  // streams, with the norm before it folded in where the plan allows.
  const bool streams = options.stream_gemv && gemm && streamsSingleRowGemm(gemm->n, gemm->k);
  auto addSingleRow = [&](InstanceRole role, nlohmann::json p) {
    p["gemv_max_rows"] = 1;
    if (streams) p["gemv_stream"] = true;
    if (options.stream_gemv && options.single_row_fusion.is_object()) p.update(options.single_row_fusion);
    add(role, kind, p, instanceName(kind, p));
  };
  if (gemm && !fused) {  // a fused gemm's skinny batches all run the fused variants
    nlohmann::json single = params;
    single["weight_type"] = "bf16";
    addSingleRow(InstanceRole::kSingleRow, std::move(single));
  }
  if (fused) {
    nlohmann::json variant = params;
    variant["weight_type"] = "bf16";
    variant.update(options.skinny_fusion);
    add(InstanceRole::kFused, kind, variant, instanceName(kind, variant));
    addSingleRow(InstanceRole::kFusedSingleRow, std::move(variant));
    // Larger batches: the gate/up projection with SwiGLU on the warpgroup
    // tensor cores, where its tiles divide the shape (its template says).
    const nlohmann::json swiglu{{"hidden", gemm->k}, {"ffn", gemm->n / 2}};
    if (options.wgmma && options.fused_prefill && options.skinny_fusion.value("silu_mul", false) && !gemm->bias &&
        gemm->n % 2 == 0 && instanceSource("gemm_swiglu", swiglu, "probe").ok())
      add(InstanceRole::kFusedPrefill, "gemm_swiglu", swiglu, instanceName("gemm_swiglu", swiglu));
  }
  if (step.kind == StepKind::kResidualRmsNorm && options.norm_of_sum.is_object() && !options.norm_of_sum.empty())
    add(InstanceRole::kNormOfSum, "rms_norm", options.norm_of_sum, instanceName("rms_norm", options.norm_of_sum));
  const auto* attention = std::get_if<PagedAttentionParams>(&step.params);
  if (!attention || attention->tree_mask) return out;

  // Decode: the bandwidth-bound split-KV kernel where its template serves
  // the pool, else the CUDA-core kernel's split mode.
  const char* decode = instanceSource("decode_attention", params, "probe").ok() ? "decode_attention"
                                                                               : "paged_attention_split";
  add(InstanceRole::kDecode, decode, params, instanceName(decode, params));
  const nlohmann::json combine = combineParams(*attention);
  add(InstanceRole::kCombine, "attention_combine", combine, instanceName("attention_combine", combine));
  const int64_t head_dim = attention->attn.head_dim;
  if (options.flash_attention && attention->attn.kv_type == "bf16" && (head_dim == 64 || head_dim == 128)) {
    const char* prefill = options.wgmma ? "flash_attention_wgmma" : "flash_attention";
    add(InstanceRole::kPrefill, prefill, params, instanceName(prefill, params));
  }
  return out;
}

}  // namespace kiln::cuda_codegen
