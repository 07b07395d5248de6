#include "runtime/cuda/executor/ssm_step.h"

#include "codegen/kernels/ssm_params.cuh"

namespace kiln::cuda {

namespace kk = kiln::kernels;

namespace {
void* ptr(CUdeviceptr p) { return reinterpret_cast<void*>(p); }
unsigned blocksOf(int64_t work, unsigned threads) { return unsigned((work + threads - 1) / threads); }
}  // namespace

Status enqueueSsmStep(const Launcher& launch, const BatchInputBuffer& inputs, const BoundStep& s,
                      const LaunchShape& shape) {
  const int b = int(shape.b);
  switch (s.kind) {
    case StepKind::kSsmConv1d: {  // x, conv pool, weight, query_start, state_slots(, bias)
      kk::SsmConvParams p{ptr(s.args[0].ptr), ptr(s.weights[2]),
                          s.weights.size() > 5 ? ptr(s.weights[5]) : nullptr, ptr(s.results[0].ptr),
                          ptr(s.pools[1]), inputs.at(s.inputs[3]), inputs.at(s.inputs[4]),
                          int(s.args[0].width), b};
      return launch(s.fn, s.block, blocksOf(s.width, s.block), unsigned(b), 1, &p);
    }
    case StepKind::kSelectiveScan: {  // x, dt, a_log, b, c, d, ssm pool, query_start, state_slots
      kk::SelectiveScanParams p{ptr(s.args[0].ptr), ptr(s.args[1].ptr), ptr(s.args[3].ptr), ptr(s.args[4].ptr),
                                ptr(s.weights[2]), ptr(s.weights[5]), ptr(s.results[0].ptr),
                                reinterpret_cast<float*>(s.pools[6]), inputs.at(s.inputs[7]), inputs.at(s.inputs[8]),
                                int(s.args[0].width), int(s.args[1].width), int(s.args[3].width), b};
      return launch(s.fn, s.block, blocksOf(s.width * s.k, s.block), unsigned(b), 1, &p);
    }
    case StepKind::kSsdScan: {  // x, dt, dt_bias, a_log, b, c, d, ssm pool, query_start, state_slots
      kk::SsdScanParams p{ptr(s.args[0].ptr), ptr(s.args[4].ptr), ptr(s.args[5].ptr), ptr(s.args[1].ptr),
                          ptr(s.weights[2]), ptr(s.weights[3]), ptr(s.weights[6]), ptr(s.results[0].ptr),
                          reinterpret_cast<float*>(s.pools[7]), inputs.at(s.inputs[8]), inputs.at(s.inputs[9]),
                          int(s.args[0].width), int(s.args[4].width), int(s.args[1].width), b, s.dt_min, s.dt_max};
      return launch(s.fn, s.block, unsigned(s.heads), unsigned(b), 1, &p);
    }
    case StepKind::kSsmGatedNorm: {  // x, gate, weight
      const int64_t rows = rowsOf(s.args[0], shape);
      kk::SsmGatedNormParams p{ptr(s.args[0].ptr), ptr(s.args[1].ptr), ptr(s.weights[2]), ptr(s.results[0].ptr),
                               int(s.args[1].width), int(rows), s.epsilon};
      return launch(s.fn, s.block, unsigned(rows), 1, 1, &p);
    }
    default: return makeError("{}: not a state-space step", s.path);
  }
}

}  // namespace kiln::cuda
