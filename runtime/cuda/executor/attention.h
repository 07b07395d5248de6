// Which kernels run a paged_attention step for a batch, and the scratch the
// split ones write. Prefill chunks (the prefill variant's query rows) run
// the tensor-core flash attention where the step has it; decode batches split
// the keys into LaunchShape::splits partitions (decodeSplits) and merge
// them: decode_attention itself (the last of a (token, kv head)'s blocks to
// arrive merges, counted in SplitKvScratch::arrivals), or attention_combine
// after paged_attention_split; the rest runs the CUDA-core paged_attention.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cuda/executor/bound_step.h"
#include "runtime/cuda/executor/device_memory.h"
#include "runtime/cuda/executor/launch_shape.h"
#include "runtime/cuda/executor/launcher.h"

namespace kiln::cuda {

// The attention kernels a batch runs (attentionPath); StepProfile's rows
// name them.
constexpr const char* kFlashPath = "flash_attention";
constexpr const char* kSplitPath = "paged_attention_split + attention_combine";
constexpr const char* kMergingSplitPath = "decode_attention (merging its splits)";
constexpr const char* kPagedPath = "paged_attention";

const char* attentionPath(const BoundStep& s, const LaunchShape& shape);

// Split-KV partials: [rows (token, split) pairs, heads, head_dim] f32 and
// their lse, [rows, heads]; [T_max, kv_heads] arrival counters of
// decode_attention's merge, zero between launches. Sized for the largest
// attention step.
struct SplitKvScratch {
  CUdeviceptr partial_out = 0, partial_lse = 0, arrivals = 0;
  int64_t rows = 0;  // (token, split) rows the partials hold

  // Nothing when no step is attention. Returns the bytes allocated.
  Result<int64_t> allocate(DeviceMemory& memory, const std::vector<BoundStep>& steps, int64_t max_tokens);
};

// Launches attention step `s` for a batch of `shape` whose inputs are in
// `inputs`.
Status enqueueAttention(const Launcher& launch, const BatchInputBuffer& inputs, const SplitKvScratch& scratch,
                        const BoundStep& s, const LaunchShape& shape);

}  // namespace kiln::cuda
