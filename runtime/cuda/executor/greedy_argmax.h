// Greedy batches end in each logits row's argmax on the GPU (largest logit,
// NaN ignored, lowest id on ties: sampling::Sampler's greedy rule), so only
// the ids come back, not the logits. Each row's vocab is split into
// `chunks` blocks whose partial maxima the last block to arrive (counted
// per row, the counter reset to zero by that block) reduces.
#pragma once

#include <cstdint>

#include "runtime/cuda/executor/bound_step.h"
#include "runtime/cuda/executor/device_memory.h"
#include "runtime/cuda/executor/kernel_set.h"
#include "runtime/cuda/executor/launcher.h"

namespace kiln::cuda {

struct GreedyArgmax {
  CUfunction fn = nullptr;
  unsigned block = 0;
  int chunks = 1;
  // [T_max, chunks] partial values and ids, [T_max] arrival counters, and
  // the [T_max] tokens, on the device and pinned on the host.
  CUdeviceptr values = 0, ids = 0, arrivals = 0, tokens = 0;
  int32_t* tokens_host = nullptr;

  // The argmax instance over logits of `vocab` columns and its scratch.
  // Returns the device bytes allocated.
  Result<int64_t> allocate(DeviceMemory& memory, const Kernel& kernel, int64_t vocab, int64_t max_tokens);
  // Each row of `logits` (a batch of `shape`) into `tokens`.
  Status enqueue(const Launcher& launch, const DeviceValue& logits, const LaunchShape& shape) const;
};

}  // namespace kiln::cuda
