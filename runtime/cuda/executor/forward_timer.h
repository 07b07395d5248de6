// Where a forward's GPU time goes, for the reports on stderr:
//   - ForwardTimer (CudaTuning::report_forward_gpu_time): events around each
//     forward, from its input copy to its output copy, summed for decode
//     forwards replayed from graphs and, by token count, for forwards
//     launched step by step (beside the wall time the engine reports: what
//     the host and the gaps between launches add). Only forwards that did
//     no host work between the events count: no graph capture, no new GEMM
//     plan (autotuning). The averages are printed when it goes.
//   - StepTimer (CudaTuning::profile_steps): an event before each step and
//     one after the last, added by phase and instance into a StepProfile
//     (step_profile.h), which the executor prints when it goes.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "runtime/cuda/executor/bound_step.h"
#include "runtime/cuda/executor/device_context.h"
#include "runtime/cuda/executor/launch_shape.h"
#include "runtime/cuda/executor/step_profile.h"

namespace kiln::cuda {

class ForwardTimer {
 public:
  explicit ForwardTimer(const DeviceContext& gpu) : gpu_(gpu) {}
  ~ForwardTimer();  // the report, then the events
  ForwardTimer(const ForwardTimer&) = delete;
  ForwardTimer& operator=(const ForwardTimer&) = delete;

  Status createEvents();  // switches it on
  // Each forward: begin before its input copy; launched, what it was; end
  // after its output copy; after the stream's synchronize, its time added.
  Status recordBegin();
  void launched(bool replayed_graph, bool timed_eager, int64_t tokens);
  Status recordEnd();
  void addTime();

 private:
  const DeviceContext& gpu_;
  CUevent begin_ = nullptr, end_ = nullptr;
  bool replayed_ = false, timed_eager_ = false;
  int64_t tokens_ = 0;
  double decode_ms_ = 0;
  int64_t decode_forwards_ = 0;
  std::map<int64_t, std::pair<double, int64_t>> eager_ms_;  // tokens -> (sum of ms, forwards)
};

class StepTimer {
 public:
  explicit StepTimer(const DeviceContext& gpu) : gpu_(gpu) {}
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

  Status createEvents(size_t steps);  // steps + 1
  // Before step i; i == steps: after the last.
  Status record(size_t i);
  // The step times of the forward of `shape` just synchronized.
  void addForward(const std::vector<BoundStep>& steps, const LaunchShape& shape);
  const StepProfile& profile() const { return profile_; }

 private:
  const DeviceContext& gpu_;
  std::vector<CUevent> events_;
  StepProfile profile_;
};

}  // namespace kiln::cuda
