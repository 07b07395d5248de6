// Which neighbouring steps the CUDA runtime folds into a skinny (decode-
// shaped, <= 8 rows) GEMM, from an entry's step list. cuBLASLt batches run
// the plan as written; skinny batches run the gemm's fused variant instead
// (codegen/kernels/gemv.cuh) and skip the steps it absorbs:
//   - gemm -> silu_mul (merged gate/up): SwiGLU in the gemm's epilogue;
//   - gemm -> residual_rms_norm -> gemm (pre-norm): the residual add in the
//     first gemm's epilogue (in f32, before rounding), the RMSNorm in the
//     second's prologue.
// A value is folded away only if no other step reads it and it is not pinned
// (an entry output, or the storage of a view). The executor and kiln-kernels
// both ask here, so kiln-kernels lists what the runtime compiles.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace kiln::cuda_codegen {

struct PlanStep {
  std::string kind;
  nlohmann::json params;
  std::vector<int64_t> value_args;  // per arg: the value id, -1 for weights, inputs and pools
  std::vector<int64_t> results;
};

struct SkinnyFusion {
  // gemm: params to add to its own for the fused variant (null: none).
  nlohmann::json gemm_params;
  // silu_mul, residual_rms_norm: done by the neighbouring fused gemms.
  bool absorbed = false;
};

std::vector<SkinnyFusion> skinnyFusions(const std::vector<PlanStep>& steps, const std::set<int64_t>& pinned);

// The manifest JSON of one entry (its "steps", "outputs", "values") as the
// inputs above; steps without the expected fields are passed over.
void planStepsFromJson(const nlohmann::json& entry, std::vector<PlanStep>& steps, std::set<int64_t>& pinned);

}  // namespace kiln::cuda_codegen
