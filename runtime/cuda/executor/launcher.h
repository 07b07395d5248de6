// How the forward's kernels reach the stream: the Launcher launches each
// generated kernel, as a programmatic dependent of the launch before it
// where the device and CudaTuning::programmatic_launch allow (sm_90+, the
// driver's cuLaunchKernelEx), else plainly; the GraphCache keeps one CUDA
// graph per decode LaunchShape, captured from the step launches on first
// use and replayed after.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>

#include "runtime/cuda/executor/device_context.h"
#include "runtime/cuda/executor/launch_shape.h"
#include "runtime/support/error.h"

namespace kiln::cuda {

struct Launcher {
  const DeviceContext& gpu;
  bool programmatic = false;

  // `params`: the kernel's one argument, a kernel_params.cuh struct.
  Status operator()(CUfunction fn, unsigned block, unsigned gx, unsigned gy, unsigned gz, void* params,
                    unsigned smem = 0) const;
};

class GraphCache {
 public:
  explicit GraphCache(const DeviceContext& gpu) : gpu_(gpu) {}
  ~GraphCache();
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // The graph captured for `shape`; null if none is.
  CUgraphExec find(const LaunchShape& shape) const;
  // Captures the graph of `shape` from what `enqueue` puts on the stream,
  // after `prepare` (which must not run inside a capture: cuBLASLt's plans
  // and their autotuning).
  Result<CUgraphExec> capture(const LaunchShape& shape, const std::function<Status()>& prepare,
                              const std::function<Status()>& enqueue);
  int64_t captures() const { return captures_; }

 private:
  const DeviceContext& gpu_;
  std::map<LaunchShape, CUgraphExec> graphs_;
  int64_t captures_ = 0;
};

}  // namespace kiln::cuda
