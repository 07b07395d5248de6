// Timing of kernel launch chains for the GPU benchmarks (kiln_attention_bench
// and its floors): a rep's launches, captured kChain times into one CUDA
// graph and replayed between two events.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/cuda/executor/driver_extras.h"
#include "test/gpu/gpu_harness.h"

namespace kiln::gpu_test {

struct Launch {
  CUfunction fn;
  unsigned grid[3];
  unsigned block;
  unsigned smem;
  void* params;  // points at the params struct, which outlives the timing
  // Launched as the executor launches on 9.0+ devices: a programmatic
  // dependent of the launch before (cuLaunchKernelEx with programmatic stream
  // serialization), so its blocks may start, and copy what does not depend
  // on that launch, while the one before finishes (wait_for_previous_kernel).
  bool programmatic = false;
};

// Median milliseconds of one rep; rep(i) returns the launches of rep i. A
// timed sample is a CUDA graph of kChain consecutive reps (rep i reading the
// i-th copy of its data), replayed between two events, divided by kChain:
// a decode kernel takes about as long as one launch's overhead, which an
// event pair around a single launch would count. torch's SDPA is timed the
// same way (test/gpu/sdpa_bench.py).
constexpr int kChain = 20;

template <class Rep>
inline Result<double> timeMedian(int reps, Rep rep) {
  const cuda::CudaDriver* d = (*Gpu::get())->d;
  auto extras = cuda::loadExtras(*d);
  if (!extras) return extras.error();
  const cuda::DriverExtras& x = *extras;
  CUstream stream = nullptr;
  KILN_RETURN_IF_ERROR(d->check(x.streamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"));
  CUgraphExec exec = nullptr;
  CUevent start = nullptr, stop = nullptr;
  std::vector<double> ms;
  auto sample = [&]() -> Status {
    KILN_RETURN_IF_ERROR(d->check(x.streamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                                  "cuStreamBeginCapture"));
    Status launched;
    for (int i = 0; i < kChain && launched.ok(); ++i)
      for (const Launch& l : rep(i)) {
        void* args[] = {l.params};
        if (l.programmatic) {
          if (!x.launchKernelEx) {
            launched = makeError("programmatic launch: the CUDA driver at {} lacks cuLaunchKernelEx", d->library.path());
            break;
          }
          launched = d->check(
              cuda::launchProgrammatic(x, l.fn, l.grid[0], l.grid[1], l.grid[2], l.block, l.smem, stream, args),
              "cuLaunchKernelEx");
        } else {
          launched = d->check(d->cuLaunchKernel(l.fn, l.grid[0], l.grid[1], l.grid[2], l.block, 1, 1, l.smem,
                                                stream, args, nullptr),
                              "cuLaunchKernel");
        }
        if (!launched.ok()) break;
      }
    CUgraph graph = nullptr;
    const CUresult ended = x.streamEndCapture(stream, &graph);
    KILN_RETURN_IF_ERROR(launched);
    KILN_RETURN_IF_ERROR(d->check(ended, "cuStreamEndCapture"));
    const CUresult made = x.graphInstantiate(&exec, graph, 0);
    x.graphDestroy(graph);
    KILN_RETURN_IF_ERROR(d->check(made, "cuGraphInstantiate"));
    for (int i = 0; i < 2; ++i) KILN_RETURN_IF_ERROR(d->check(x.graphLaunch(exec, stream), "cuGraphLaunch (warm-up)"));
    KILN_RETURN_IF_ERROR(d->check(x.streamSynchronize(stream), "cuStreamSynchronize (warm-up)"));
    KILN_RETURN_IF_ERROR(d->check(d->cuEventCreate(&start, 0), "cuEventCreate"));
    KILN_RETURN_IF_ERROR(d->check(d->cuEventCreate(&stop, 0), "cuEventCreate"));
    for (int i = 0; i < reps; ++i) {
      d->cuEventRecord(start, stream);
      KILN_RETURN_IF_ERROR(d->check(x.graphLaunch(exec, stream), "cuGraphLaunch"));
      d->cuEventRecord(stop, stream);
      KILN_RETURN_IF_ERROR(d->check(d->cuEventSynchronize(stop), "cuEventSynchronize"));
      float t = 0;
      d->cuEventElapsedTime_v2(&t, start, stop);
      ms.push_back(double(t) / kChain);
    }
    return Status::success();
  };
  const Status status = sample();
  if (start) d->cuEventDestroy_v2(start);
  if (stop) d->cuEventDestroy_v2(stop);
  if (exec) x.graphExecDestroy(exec);
  x.streamDestroy(stream);
  KILN_RETURN_IF_ERROR(status);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// One result: the line printed, and the fields --json writes.
struct Record {
  std::string line;
  nlohmann::json fields;
};

}  // namespace kiln::gpu_test
