// Which params of a kernel kind name the element type of an activation
// operand or result, and how a plan's activation type fills them in.
//
// kiln-compile writes a `*_type` param only where the value's type differs
// from the plan's activation type (LowerToKernels' appendType: the f32
// residual stream of a bf16 plan), and the CUDA templates take an absent one
// as bf16, the activation type of the plans they were first written for. An
// f32 plan (kiln-compile's default, vLLM's --dtype float32) leaves them all
// out, so before generating its instances every absent one is named f32:
//   rms_norm {hidden, epsilon}  ->  rms_norm {hidden, epsilon, x_type: f32, out_type: f32}
// The executor checks its values' types against the same table.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>
#include <vector>

namespace kiln::cuda_codegen {

struct ActivationTypeParams {
  // args[i]: the param typing value arg i (nullptr: not an activation, or no
  // param). An arg past the end, or one that is not a value, has none.
  std::vector<const char*> args;
  // results_from_last[i]: the param typing the i-th result counted from the
  // last, so residual_rms_norm's optional sum (writes_sum) comes before out.
  std::vector<const char*> results_from_last;
};

// The typed operands of `kind` (a manifest kind or a runtime one such as
// attention_combine). gemm has none: its skinny kernel reads and writes
// bf16, and cuBLASLt takes the plan's activation type.
const ActivationTypeParams& activationTypeParams(std::string_view kind);

// `params` with every activation type param of `kind` that it lacks set to
// `activation_type`. A bf16 plan's params are returned as they are: bf16 is
// the templates' default, and its instance names stay the manifest's.
nlohmann::json withActivationTypes(std::string_view kind, nlohmann::json params, std::string_view activation_type);

}  // namespace kiln::cuda_codegen
