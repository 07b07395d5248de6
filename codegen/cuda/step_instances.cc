#include "codegen/cuda/step_instances.h"

#include <fmt/format.h>

#include "codegen/cuda/instance_source.h"

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

StepInstance greedyInstance(int64_t vocab, std::string_view logits_type) {
  const nlohmann::json params{{"vocab", vocab}, {"logits_type", std::string(logits_type)}};
  return {InstanceRole::kGreedy, "argmax", params, boundedInstanceName(instanceName("argmax", params))};
}

Result<std::vector<StepInstance>> stepInstances(std::string_view kind, const nlohmann::json& params,
                                                const std::string& manifest_instance,
                                                const StepInstanceOptions& options) {
  std::vector<StepInstance> out;
  auto add = [&](InstanceRole role, std::string_view k, const nlohmann::json& p, std::string name) {
    out.push_back({role, std::string(k), p, boundedInstanceName(name)});
  };
  if (kind == "gemm" && params.value("weight_type", "") != "bf16") {
    nlohmann::json bf16 = params;
    bf16["weight_type"] = "bf16";
    add(InstanceRole::kStep, kind, bf16, instanceName(kind, bf16));
  } else {
    add(InstanceRole::kStep, kind, params, manifest_instance);
  }
  if (kind == "gemm") {
    nlohmann::json single = params;
    single["weight_type"] = "bf16";
    single["gemv_max_rows"] = 1;
    add(InstanceRole::kSingleRow, kind, single, instanceName(kind, single));
  }
  if (kind == "gemm" && options.skinny_fusion.is_object() && !options.skinny_fusion.empty()) {
    nlohmann::json fused = params;
    fused["weight_type"] = "bf16";
    fused.update(options.skinny_fusion);
    add(InstanceRole::kFused, kind, fused, instanceName(kind, fused));
    fused["gemv_max_rows"] = 1;
    add(InstanceRole::kFusedSingleRow, kind, fused, instanceName(kind, fused));
  }
  if (kind != "paged_attention" || params.value("tree_mask", false)) return out;

  // Decode: the bandwidth-bound split-KV kernel where its template serves
  // the pool, else the CUDA-core kernel's split mode.
  const char* decode = instanceSource("decode_attention", params, "probe").ok() ? "decode_attention"
                                                                               : "paged_attention_split";
  add(InstanceRole::kDecode, decode, params, instanceName(decode, params));
  const nlohmann::json combine{{"heads", params.value("heads", 0)}, {"head_dim", params.value("head_dim", 0)}};
  add(InstanceRole::kCombine, "attention_combine", combine, instanceName("attention_combine", combine));
  const int64_t head_dim = params.value("head_dim", 0);
  if (options.flash_attention && params.value("kv_type", "") == "bf16" && (head_dim == 64 || head_dim == 128)) {
    const char* prefill = options.wgmma ? "flash_attention_wgmma" : "flash_attention";
    add(InstanceRole::kPrefill, prefill, params, instanceName(prefill, params));
  }
  return out;
}

}  // namespace kiln::cuda_codegen
