#include "runtime/cuda/executor/launcher.h"

namespace kiln::cuda {

namespace {

// Graphs kept at once: a long-running server sees many decode shapes, so
// past this many the cache starts over rather than grow.
constexpr size_t kMaxGraphs = 128;

}  // namespace

Status Launcher::operator()(CUfunction fn, unsigned block, unsigned gx, unsigned gy, unsigned gz, void* params,
                            unsigned smem) const {
  void* args[] = {params};
  const CudaDriver* d = gpu.d;
  if (programmatic)
    return d->check(launchProgrammatic(gpu.x, fn, gx, gy, gz, block, smem, gpu.stream, args), "cuLaunchKernelEx");
  return d->check(d->cuLaunchKernel(fn, gx, gy, gz, block, 1, 1, smem, gpu.stream, args, nullptr),
                  "cuLaunchKernel");
}

GraphCache::~GraphCache() {
  for (auto& [shape, exec] : graphs_) gpu_.x.graphExecDestroy(exec);
}

CUgraphExec GraphCache::find(const LaunchShape& shape) const {
  auto it = graphs_.find(shape);
  return it == graphs_.end() ? nullptr : it->second;
}

Result<CUgraphExec> GraphCache::capture(const LaunchShape& shape, const std::function<Status()>& prepare,
                                        const std::function<Status()>& enqueue) {
  const CudaDriver* d = gpu_.d;
  const DriverExtras& x = gpu_.x;
  if (graphs_.size() >= kMaxGraphs) {
    for (auto& [key, exec] : graphs_) x.graphExecDestroy(exec);
    graphs_.clear();
  }
  KILN_RETURN_IF_ERROR(prepare());
  KILN_RETURN_IF_ERROR(d->check(x.streamBeginCapture(gpu_.stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                                "cuStreamBeginCapture"));
  Status enqueued = enqueue();
  CUgraph graph = nullptr;
  CUresult ended = x.streamEndCapture(gpu_.stream, &graph);
  if (!enqueued.ok()) {
    if (graph) x.graphDestroy(graph);
    return enqueued.error();
  }
  KILN_RETURN_IF_ERROR(d->check(ended, "cuStreamEndCapture"));
  CUgraphExec exec = nullptr;
  CUresult made = x.graphInstantiate(&exec, graph, 0);
  x.graphDestroy(graph);
  KILN_RETURN_IF_ERROR(d->check(made, "cuGraphInstantiate"));
  ++captures_;
  graphs_.emplace(shape, exec);
  return exec;
}

}  // namespace kiln::cuda
