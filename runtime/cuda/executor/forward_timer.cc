#include "runtime/cuda/executor/forward_timer.h"

#include <fmt/format.h>

#include <string>

#include "runtime/cuda/executor/attention.h"
#include "runtime/cuda/executor/gemm_dispatch.h"
#include "runtime/cuda/executor/moe_step.h"

namespace kiln::cuda {

ForwardTimer::~ForwardTimer() {
  if (decode_forwards_ > 0)
    fmt::print(stderr, "cuda: {} decode forwards replayed from graphs, {:.3f} ms each on the GPU (input copy to output copy)\n",
               decode_forwards_, decode_ms_ / double(decode_forwards_));
  for (const auto& [tokens, time] : eager_ms_)
    fmt::print(stderr, "cuda: {} forwards of {} tokens launched step by step, {:.3f} ms each on the GPU (input copy to output copy)\n",
               time.second, tokens, time.first / double(time.second));
  for (CUevent e : {begin_, end_})
    if (e) gpu_.d->cuEventDestroy_v2(e);
}

Status ForwardTimer::createEvents() {
  const CudaDriver* d = gpu_.d;
  KILN_RETURN_IF_ERROR(d->check(d->cuEventCreate(&begin_, CU_EVENT_DEFAULT), "cuEventCreate"));
  return d->check(d->cuEventCreate(&end_, CU_EVENT_DEFAULT), "cuEventCreate");
}

Status ForwardTimer::recordBegin() {
  if (!begin_) return {};
  return gpu_.d->check(gpu_.d->cuEventRecord(begin_, gpu_.stream), "cuEventRecord (forward begin)");
}

void ForwardTimer::launched(bool replayed_graph, bool timed_eager, int64_t tokens) {
  replayed_ = replayed_graph;
  timed_eager_ = timed_eager;
  tokens_ = tokens;
}

Status ForwardTimer::recordEnd() {
  if (!end_) return {};
  return gpu_.d->check(gpu_.d->cuEventRecord(end_, gpu_.stream), "cuEventRecord (forward end)");
}

void ForwardTimer::addTime() {
  if (!end_ || !(replayed_ || timed_eager_)) return;
  float ms = 0;
  if (gpu_.d->cuEventElapsedTime_v2(&ms, begin_, end_) != CUDA_SUCCESS) return;
  if (replayed_) {
    decode_ms_ += ms;
    ++decode_forwards_;
  } else {
    auto& [sum, count] = eager_ms_[tokens_];
    sum += ms;
    ++count;
  }
}

StepTimer::~StepTimer() {
  for (CUevent e : events_) gpu_.d->cuEventDestroy_v2(e);
}

Status StepTimer::createEvents(size_t steps) {
  events_.resize(steps + 1);
  for (CUevent& e : events_)
    KILN_RETURN_IF_ERROR(gpu_.d->check(gpu_.d->cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate (step profile)"));
  return {};
}

Status StepTimer::record(size_t i) {
  return gpu_.d->check(gpu_.d->cuEventRecord(events_[i], gpu_.stream), "cuEventRecord");
}

void StepTimer::addForward(const std::vector<BoundStep>& steps, const LaunchShape& shape) {
  const std::string phase = shape.n == shape.b ? fmt::format("decode, batch {}", shape.b)
                                               : fmt::format("prefill, {} tokens", shape.n);
  if (!profile_.beginForward(phase)) return;  // a shape's first pass is not counted
  for (size_t i = 0; i < steps.size(); ++i) {
    const BoundStep& s = steps[i];
    float ms = 0;
    gpu_.d->cuEventElapsedTime_v2(&ms, events_[i], events_[i + 1]);
    const int64_t rows = s.args.empty() ? 0 : rowsOf(s.args[0], shape);
    if (doneByGemmBefore(steps, i, rows)) continue;  // done by the gemm before it: nothing ran
    if (doneByGemmAfter(s, rows)) continue;           // ... or by the gemm after it
    std::string name = s.kind == StepKind::kSplit ? "split (copies)" : s.instance;
    if (s.kind == StepKind::kGemm) {
      const GemvKernel* skinny = skinnyKernel(s, rows);
      if (!skinny) skinny = sparse24Kernel(s, rows);
      name = skinny ? skinny->instance : fmt::format("cuBLASLt gemm n {} k {}", s.width, s.k);
    }
    if (s.kind == StepKind::kGemm && fusedSwiGlu(s, rows)) name = "gemm_swiglu_wgmma (gate/up + silu_mul)";
    if (s.kind == StepKind::kGemm && addsResidual(s, rows)) name += " (+ residual, f32 out)";
    if (s.kind == StepKind::kGemm && expandsWeight(s, rows)) name = "dequantize + " + name;
    if (sumFromGemmBefore(steps, i, rows)) name += " (the sum from the gemm: rms_norm)";
    if (s.kind == StepKind::kMoeFfn) name = fmt::format("{} (experts {}, top {})", moePath(s, rows), s.experts, s.k);
    if (s.kind == StepKind::kPagedAttention) {
      const char* path = attentionPath(s, shape);
      name = fmt::format("{} (heads {}/{}, head_dim {})", path == kFlashPath ? s.flash_kind.c_str() : path, s.heads,
                         s.kv_heads, s.head_dim);
    }
    profile_.addStep(phase, name, ms);
  }
}

}  // namespace kiln::cuda
