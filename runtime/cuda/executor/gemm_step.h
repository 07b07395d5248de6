// Runs one gemm step at a batch's row count, on the kernel gemm_dispatch.h
// picks: a skinny kernel (gemv.cuh, or gemv_stream.cuh's persistent blocks
// with a folded norm), with a folded silu_mul or rope_kv_append writing
// that step's outputs; gemm_swiglu_wgmma; a 2:4 sparse weight's
// sparse24_gemv or sparse GEMM; or cuBLASLt (gemm_planner.h).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cuda/executor/bound_step.h"
#include "runtime/cuda/executor/device_memory.h"
#include "runtime/cuda/executor/gemm_planner.h"
#include "runtime/cuda/executor/launcher.h"

namespace kiln::cuda {

// `s` is one of `steps` (whose folded neighbours it reads and writes);
// `inputs` holds the batch's inputs, `num_slots` is the KV pools' (a folded
// rope_kv_append's bound).
Status enqueueGemm(const Launcher& launch, GemmPlanner& cublas, const BatchInputBuffer& inputs, int64_t num_slots,
                   const std::vector<BoundStep>& steps, const BoundStep& s, int64_t rows);

}  // namespace kiln::cuda
