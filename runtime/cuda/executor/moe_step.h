// How a moe_ffn step reaches the stream: gate/up and down as moe.cuh's
// gathered GEMVs over [column tiles, chosen experts, row groups], or, for
// batches in the step's grouped rows (several slots an expert on average),
// as moe_grouped_mma.cuh's tensor-core GEMMs over [column tiles, slot
// tiles]; then moe_combine sums each token's slots. The slots' scratch is
// the step's (allocateMoeScratch).
#pragma once

#include <cstdint>

#include "runtime/cuda/executor/bound_step.h"
#include "runtime/cuda/executor/launcher.h"

namespace kiln::cuda {

// The kernels a moe_ffn step runs for `rows` tokens (StepProfile's rows name them).
constexpr const char* kMoeGemvPath = "moe_gate_up + moe_down + moe_combine";
constexpr const char* kMoeGroupedPath = "moe_gate_up_mma + moe_down_mma + moe_combine";
const char* moePath(const BoundStep& s, int64_t rows);

// Launches step `s` over x [rows, hidden] with the router's weights and ids
// (its args 0-2) into its result.
Status enqueueMoeExperts(const Launcher& launch, const BoundStep& s, int64_t rows);

}  // namespace kiln::cuda
