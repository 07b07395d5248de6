// Where a forward pass's GPU time goes, step by step: what `kiln bench
// --profile-steps` prints. The executor times each step between CUDA events
// (so steps run one after another, without graphs or overlap) and adds the
// times here by phase (prefill or decode, with the batch shape) and kernel
// instance; the report sums the instances over layers. The first pass of
// each phase is not counted: it carries first-use costs (lazily loaded
// library kernels, GEMM plans and their autotuning).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

namespace kiln::cuda {

class StepProfile {
 public:
  // One forward pass of `phase` ran (once per pass, before its steps);
  // false for the first of its phase, whose steps are then not counted.
  bool beginForward(const std::string& phase);
  // One step of a counted pass took `ms` on the GPU.
  void addStep(const std::string& phase, const std::string& instance, double ms);
  bool empty() const { return forwards_.empty(); }
  // A table per phase: instance, launches per forward, ms per forward, share
  // of the phase, µs per launch; slowest first.
  std::string report() const;

 private:
  struct Row {
    int64_t calls = 0;
    double ms = 0;
  };
  std::map<std::string, int64_t> forwards_;                      // counted passes by phase
  std::map<std::string, bool> warmed_;                           // phases past their first pass
  bool counting_ = false;                                        // the current pass is counted
  std::map<std::tuple<std::string, std::string>, Row> rows_;     // by (phase, instance)
};

}  // namespace kiln::cuda
