#include "runtime/cuda/executor/greedy_argmax.h"

#include "codegen/kernels/kernel_params.cuh"
#include "runtime/cuda/executor/kiln_assign.h"

namespace kiln::cuda {

Result<int64_t> GreedyArgmax::allocate(DeviceMemory& memory, const Kernel& kernel, int64_t vocab,
                                       int64_t max_tokens) {
  fn = kernel.fn;
  block = kernel.block;
  chunks = kernels::argmaxChunks(vocab);
  const int64_t partials = max_tokens * chunks;
  KILN_ASSIGN(partial_values, memory.alloc(partials * 4, "the greedy argmax partials"));
  KILN_ASSIGN(partial_ids, memory.alloc(partials * 4, "the greedy argmax partials"));
  KILN_ASSIGN(counters, memory.allocZeroed(max_tokens * 4, "the greedy argmax counters"));
  KILN_ASSIGN(device_tokens, memory.alloc(max_tokens * 4, "the greedy tokens"));
  KILN_ASSIGN(host_tokens, memory.allocHost(max_tokens * 4, "the greedy tokens"));
  values = partial_values;
  ids = partial_ids;
  arrivals = counters;
  tokens = device_tokens;
  tokens_host = static_cast<int32_t*>(host_tokens);
  return 2 * partials * 4 + 2 * max_tokens * 4;
}

Status GreedyArgmax::enqueue(const Launcher& launch, const DeviceValue& logits, const LaunchShape& shape) const {
  const int64_t rows = rowsOf(logits, shape);
  kernels::ArgmaxParams p{reinterpret_cast<const void*>(logits.ptr), reinterpret_cast<float*>(values),
                          reinterpret_cast<int*>(ids), reinterpret_cast<unsigned*>(arrivals),
                          reinterpret_cast<int*>(tokens), int(rows)};
  Status status = launch(fn, block, unsigned(rows), unsigned(chunks), 1, &p);
  if (!status.ok()) return makeError("greedy argmax over the logits: {}", status.error().message);
  return {};
}

}  // namespace kiln::cuda
