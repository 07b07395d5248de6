#include "runtime/artifact/plan_options.h"

#include <fmt/format.h>

#include <initializer_list>
#include <utility>

namespace kiln {

namespace {

Error invalid(std::string_view flag, std::string_view value, std::string_view accepted) {
  return makeError("invalid value '{}' for {}, expected {}", value, flag, accepted);
}

bool oneOf(const std::string& value, std::initializer_list<std::string_view> accepted) {
  for (std::string_view a : accepted)
    if (value == a) return true;
  return false;
}

}  // namespace

Status validatePageSize(unsigned page_size, std::string_view option) {
  if (page_size == 0 || page_size > PlanOptions::kMaxPageSize || (page_size & (page_size - 1)) != 0)
    return invalid(option, std::to_string(page_size), "a power of two from 1 to 256");
  return {};
}

Status validateQuantKv(const std::string& kv, std::string_view option) {
  if (!oneOf(kv, {"none", "f16", "bf16", "int8", "fp8"})) return invalid(option, kv, "one of: none, f16, bf16, int8, fp8");
  return {};
}

Status validateSparsity(const std::string& sparsity, const std::string& method, std::string_view option,
                        std::string_view method_option) {
  if (!oneOf(sparsity, {"none", "2:4"})) return invalid(option, sparsity, "one of: none, 2:4");
  if (!oneOf(method, {"magnitude", "sparsegpt"})) return invalid(method_option, method, "one of: magnitude, sparsegpt");
  return {};
}

Status validateTarget(const std::string& target, std::string_view option) {
  if (!oneOf(target, {"cpu", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_120"}))
    return invalid(option, target, fmt::format("one of: {}", kTargets));
  return {};
}

std::optional<std::string> targetForDevice(int major, int minor) {
  const int version = major * 10 + minor;
  if (version == 90) return "sm_90a";
  std::optional<std::string> best;
  for (int listed : {80, 86, 89, 90, 100, 120})
    if (listed <= version) best = fmt::format("sm_{}", listed);
  return best;
}

Status validateParallelism(const PlanOptions& options) {
  if (options.tensor_parallel == 0)
    return invalid("--tensor-parallel", "0", "a positive number of ranks");
  if (options.pipeline_parallel == 0)
    return invalid("--pipeline-parallel", "0", "a positive number of stages");
  if (options.tp_rank >= options.tensor_parallel)
    return makeError("tensor-parallel rank {} is not below --tensor-parallel {}", options.tp_rank,
                     options.tensor_parallel);
  if (options.pp_stage >= options.pipeline_parallel)
    return makeError("pipeline stage {} is not below --pipeline-parallel {}", options.pp_stage,
                     options.pipeline_parallel);
  // The verify and draft entries are cut from the whole forward; a stage has
  // no logits to verify against.
  if (options.pipeline_parallel > 1 && options.spec_tree != "none")
    return makeError("--pipeline-parallel {} does not combine with --spec-tree {}: speculative verify needs "
                     "the whole layer stack in one plan",
                     options.pipeline_parallel, options.spec_tree);
  if (options.tensor_parallel * options.pipeline_parallel > 1 && options.megakernel)
    return makeError("--megakernel plans one device's decode; it does not combine with --tensor-parallel {} "
                     "--pipeline-parallel {}",
                     options.tensor_parallel, options.pipeline_parallel);
  return {};
}

Status validatePlanOptions(const PlanOptions& options) {
  if (!oneOf(options.quant_weights, {"none", "int8", "int4", "fp8"}))
    return invalid("--quant-weights", options.quant_weights, "one of: none, int8, int4, fp8");
  KILN_RETURN_IF_ERROR(validateQuantKv(options.quant_kv));
  if (options.quant_group_size == 0 || options.quant_group_size % 32 != 0)
    return invalid("--quant-group-size", std::to_string(options.quant_group_size),
                   "a positive multiple of 32 (32, 64, 128, ...)");
  KILN_RETURN_IF_ERROR(validatePageSize(options.page_size));
  KILN_RETURN_IF_ERROR(validateSparsity(options.sparsity, options.sparsity_method));
  if (!oneOf(options.spec_mode, {"greedy", "rejection"}))
    return invalid("--spec-mode", options.spec_mode, "one of: greedy, rejection");
  const std::string& tree = options.spec_tree;
  if (tree != "none" && tree.rfind("chain:", 0) != 0 && tree.rfind("widths:", 0) != 0)
    return invalid("--spec-tree", tree, "one of: none, chain:K (e.g. chain:4), widths:W1,W2,... (e.g. widths:2,2,1)");
  if (options.spec_layerskip > 0 && tree == "none")
    return makeError("--spec-layerskip {} adds a draft entry beside the verify entry: give --spec-tree too (e.g. "
                     "--spec-tree=chain:4)",
                     options.spec_layerskip);
  if (!oneOf(options.activation_type, {"f32", "bf16", "f16"}))
    return invalid("--activation-type", options.activation_type, "one of: f32, bf16, f16");
  KILN_RETURN_IF_ERROR(validateTarget(options.target));
  KILN_RETURN_IF_ERROR(validateParallelism(options));
  // fp8 e4m3 arithmetic needs Ada's or Hopper's tensor cores (sm_89 and later).
  for (auto [flag, value] : {std::pair<std::string_view, const std::string&>{"--quant-weights", options.quant_weights},
                             {"--quant-kv", options.quant_kv}})
    if (value == "fp8" && (options.target == "sm_80" || options.target == "sm_86"))
      return makeError("{} fp8 needs a target of sm_89 or later (fp8 tensor cores), got --target {}", flag,
                       options.target);
  return {};
}

}  // namespace kiln
