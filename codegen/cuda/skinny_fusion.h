// Which neighbouring steps the CUDA runtime folds into a skinny (decode-
// shaped, <= 8 rows) GEMM, from an entry's step list. cuBLASLt batches run
// the plan as written; skinny batches run the gemm's fused variant instead
// (codegen/kernels/gemv.cuh) and skip the steps it absorbs:
//   - gemm -> silu_mul (merged gate/up): SwiGLU in the gemm's epilogue;
//   - gemm -> rope_kv_append (merged qkv): rope and the KV append in the
//     gemm's epilogue, which writes the rope step's q and pools. The planner
//     puts q over the gemm's input rows (dead after the gemm in the plan as
//     written), so q gets storage of its own (SkinnyFusion::own_storage).
//   - residual_rms_norm -> gemm, batches of one row only: the streamed
//     single-row gemm (gemv_stream.cuh) computes the norm from its inputs at
//     the start of each block, and block 0 writes the sum. Only where the
//     gemm streams its shape (streamsSingleRowGemm), the norm's output is
//     read by the gemm alone, and nothing the pair writes (the sum, the
//     gemm's or its fused step's output) shares arena rows with the norm's
//     inputs, which other blocks may still be reading.
// And one fold for batches the skinny kernels do not take (cuBLASLt's; the
// executor uses it at decode sizes only, where the algorithm is measured:
// addsResidual in runtime/cuda/executor/gemm_dispatch.h says why):
//   - gemm -> residual_rms_norm of its output (no bias, an f32 stream and
//     sum): the GEMM's epilogue adds the stream (beta 1, C the norm's x, D
//     its sum, in f32), so the gemm writes the norm's sum and never its own
//     output, and the norm then only normalizes the sum (an rms_norm
//     instance over it): half the norm's bytes move into the GEMM's
//     epilogue. cuBLASLt reads C and B while it writes D, so the sum
//     must not share rows with either; where the planner put it there (the
//     o_proj's sum over the attention output, dead after the gemm in the
//     plan as written), the sum gets storage of its own, one buffer for
//     every such sum, only where their lives do not overlap.
// Only gemms of dense float weights take part: not block-quantized or 2:4
// sparse ones, whose kernels have no fused forms.
// A value is folded away only if no other step reads it and it is not pinned
// (an entry output, or the storage of a view). The executor and kiln-kernels
// both ask here, so kiln-kernels lists what the runtime compiles. Nor is a
// SwiGLU fusion made whose output shares arena rows with its input: the
// planner may reuse the storage of a value dead after a step, which the
// fused kernel's other blocks would still be reading.
// Other placements of the norm (in the GEMVs around it, in their last block,
// or as a scale in the consumer's epilogue) were slower: docs/performance.md,
// "Tried and not kept".
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/artifact/manifest.h"

namespace kiln::cuda_codegen {

// The view of an entry the fusions are decided on: each step's kind, typed
// params, value args and results, and where values live.
struct PlanStep {
  StepKind kind = StepKind::kAdd;
  StepParams params;
  std::vector<int64_t> value_args;  // per arg: the value id, -1 for weights, inputs and pools
  std::vector<int64_t> results;
  std::string instance;  // the plan's name for the step's own kernel
};

struct PlanEntry {
  std::vector<PlanStep> steps;
  std::set<int64_t> pinned;  // entry outputs and views' storage
  std::set<int64_t> views;   // values that are views of another's storage
  // value -> its storage's arena rows [offset, offset + row_bytes) (views resolved)
  std::map<int64_t, std::pair<int64_t, int64_t>> storage;
  // The plan's activation_type. The fused kernels are gemv.cuh's, which
  // read and write bf16: an f32 plan gets none.
  std::string activation_type = "bf16";
};

struct SkinnyFusion {
  // gemm: params to add to its own for the fused variant (null: none).
  nlohmann::json gemm_params;
  // gemm: params to add to its single-row instance only (the folded norm's).
  nlohmann::json single_row_params;
  // silu_mul, rope_kv_append: done by the gemm before it.
  bool absorbed = false;
  // residual_rms_norm: done by the gemm after it in batches of one row.
  bool absorbed_single_row = false;
  // gemm: cuBLASLt batches write the next step's (residual_rms_norm) sum
  // from its x and this gemm's product (beta 1); its own output is not written.
  bool writes_norm_sum = false;
  // residual_rms_norm after a writes_norm_sum gemm: cuBLASLt batches only
  // normalize the sum (norm_of_sum_params, an rms_norm instance's) ...
  bool sum_from_gemm = false;
  nlohmann::json norm_of_sum_params;
  // ... which lives apart from the arena, in storage of the runtime's (one
  // buffer serves every such sum: their lives do not overlap), for every batch.
  bool sum_own_storage = false;
  // An absorbed rope_kv_append: its result (q) must live apart from the
  // arena, in storage of the runtime's, for every batch (one buffer can
  // serve every layer: each q is read by its attention before the next
  // layer's is written).
  bool own_storage = false;
};

std::vector<SkinnyFusion> skinnyFusions(const PlanEntry& entry);

// `entry` of a loaded plan as skinnyFusions reads it.
PlanEntry planEntryOf(const Entry& entry, const std::string& activation_type);

}  // namespace kiln::cuda_codegen
