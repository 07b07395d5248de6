// Which of a plan's GEMMs are the model's decoder linears (q, k, v, o, gate,
// up, down), and where their weights and inputs are. A GEMM's weight is one
// checkpoint tensor or a concat_rows of several (merged QKV, gate-up); its
// input is an arena value, possibly a view, whose storage belongs to the
// step that wrote it (the CPU executor's step observer reports that one).
// The embedding and the LM head are not decoder linears: kiln's weight
// schemes leave them as they are.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/formats/model_source.h"
#include "runtime/artifact/manifest.h"
#include "runtime/support/error.h"

namespace kiln::quantize {

// The decoder linears' roles, each a checkpoint tensor per layer.
inline constexpr formats::WeightRole kDecoderLinearRoles[] = {
    formats::WeightRole::kQ,    formats::WeightRole::kK,  formats::WeightRole::kV,
    formats::WeightRole::kO,    formats::WeightRole::kGate, formats::WeightRole::kUp,
    formats::WeightRole::kDown};

// One checkpoint tensor's rows inside a GEMM weight.
struct LinearPart {
  std::string tensor;  // e.g. "blk.3.attn_v.weight"
  formats::WeightRole role = formats::WeightRole::kQ;
  int64_t row_begin = 0, rows = 0;
};

struct PlanLinear {
  size_t step = 0;        // in entries.forward.steps
  int64_t weight = 0;     // the plan weight id the GEMM reads
  int64_t input = 0;      // the value that holds its input's storage (views resolved)
  int64_t rows = 0, cols = 0;  // the weight's [out, in]
  int layer = 0;
  std::vector<LinearPart> parts;  // in row order
};

// The decoder linears of `plan`'s forward entry, in step order. Fails when a
// GEMM reads part of a decoder linear together with something else.
Result<std::vector<PlanLinear>> findPlanLinears(const Manifest& plan,
                                                const formats::ModelSource& model);

// The value whose storage `value` shares (itself when it is not a view).
int64_t storageOf(const Entry& entry, int64_t value);

}  // namespace kiln::quantize
