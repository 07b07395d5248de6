// How the state-space steps reach the stream (codegen/kernels/ssm.cuh): each
// kind's parameter struct filled from its bound operands, the batch's
// query_start and state_slots read where BatchInputBuffer stages them, and
// its grid:
//   ssm_conv1d      [ceil(channels / threads), B]
//   selective_scan  [ceil(channels · state / threads), B]
//   ssd_scan        [heads, B]
//   ssm_gated_norm  [rows]
// The pools are the step's (StatePools, a slot per sequence); the inputs
// are contiguous rows, so every row stride is its value's width.
#pragma once

#include "runtime/cuda/executor/bound_step.h"
#include "runtime/cuda/executor/device_memory.h"
#include "runtime/cuda/executor/launch_shape.h"
#include "runtime/cuda/executor/launcher.h"

namespace kiln::cuda {

// Launches step `s` (one of the four kinds above) for a batch of `shape`.
Status enqueueSsmStep(const Launcher& launch, const BatchInputBuffer& inputs, const BoundStep& s,
                      const LaunchShape& shape);

}  // namespace kiln::cuda
