#include "models/quantize/calibration_run.h"

#include <vector>

#include "runtime/backend/plan_kv_pool.h"
#include "runtime/cpu/executor/executor.h"

namespace kiln::quantize {

Status runCalibration(const Manifest& plan, const WeightStore& weights, const CalibrationSet& set,
                      const std::map<int64_t, int64_t>& inputs, const InputCallback& on_input) {
  const Entry* entry = plan.findEntry("forward");
  if (!entry) return makeError("{}: the plan has no forward entry", plan.path);
  if (set.sequences.empty()) return makeError("no calibration sequences");
  const int64_t count = int64_t(set.sequences.size());
  const int64_t ctx = int64_t(set.sequences[0].size());
  const int64_t page = plan.kv_cache.page_size;
  const int64_t blocks_per_seq = (ctx + page - 1) / page;
  auto executor = cpu::CpuExecutor::create(plan, weights, kvPoolConfigFor(plan, count * blocks_per_seq),
                                           count * ctx);
  if (!executor.ok()) return executor.error();

  // Sequence s owns pool blocks [s * blocks_per_seq, (s + 1) * blocks_per_seq).
  std::vector<int32_t> tokens, positions, slots, tables, query_start{0}, kv_lens;
  for (int64_t s = 0; s < count; ++s) {
    for (int64_t p = 0; p < ctx; ++p) {
      tokens.push_back(set.sequences[size_t(s)][size_t(p)]);
      positions.push_back(int32_t(p));
      slots.push_back(int32_t((s * blocks_per_seq + p / page) * page + p % page));
    }
    for (int64_t b = 0; b < blocks_per_seq; ++b) tables.push_back(int32_t(s * blocks_per_seq + b));
    query_start.push_back(int32_t((s + 1) * ctx));
    kv_lens.push_back(int32_t(ctx));
  }
  BatchInputs batch{tokens, positions, slots, tables, int(blocks_per_seq), query_start, kv_lens};

  Status failed;
  (*executor)->setStepObserver([&](size_t step, StepKind, size_t result, std::span<const float> rows,
                                   int64_t width) {
    if (!failed.ok()) return;
    const int64_t value = entry->steps[step].results[result];
    auto it = inputs.find(value);
    if (it == inputs.end()) return;
    const int64_t k = it->second, n = count * ctx;
    if (int64_t(rows.size()) != n * k) {
      failed = makeError("{}: value {} has {} floats ({} a row), expected {} tokens of {}",
                         entry->steps[step].path, value, rows.size(), width, n, k);
      return;
    }
    failed = on_input(value, rows.data(), n, k);
  });
  std::vector<float> logits(size_t(count * (*executor)->vocabSize()));
  KILN_RETURN_IF_ERROR((*executor)->forward(batch, logits));
  return failed;
}

}  // namespace kiln::quantize
