// The megakernel's task graph run on the CPU (CpuExecutor::forwardTasks):
// the host-side emulation of the persistent kernel's dependency protocol.
// Each task runs its step's CPU kernel restricted to its tile: a gemm tile
// the rows of W of its output columns (each output element is the same dot
// product as in the whole GEMM), an attention task the query heads of its
// kv head for the rows of its sequence; any other task its whole step. A
// seeded random scheduler picks the next task among those whose waits are
// met, as SMs racing for counters would. Every task's reads are checked
// against a shadow of the arena that records which value last wrote each
// element: a read of an element its value has not written yet (a missing
// wait on its producer), or that another value has overwritten since (a
// missing wait before a reuse of the arena's rows), is an error naming the
// task, the value and the element.
#include <algorithm>
#include <cstring>
#include <map>
#include <random>

#include "runtime/cpu/executor/bound_step.h"
#include "runtime/cpu/executor/executor.h"
#include "runtime/cpu/kernels/linear.h"
#include "runtime/cpu/kernels/paged_attention.h"

namespace kiln::cpu {
namespace {

// Which value last wrote each f32 element of the arena (-1: none this call),
// and which pools have had this call's keys and values appended.
class ArenaShadow {
 public:
  ArenaShadow(const float* arena, int64_t floats) : arena_(arena), owner_(size_t(floats), -1) {}

  // Rows [row_begin, row_end), columns [col_begin, col_end) of `v`.
  void write(const Operand& v, int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end) {
    if (v.element_bytes != 4) return;
    for (int64_t r = row_begin; r < row_end; ++r)
      std::fill_n(owner_.begin() + index(v, r, col_begin), col_end - col_begin, int32_t(v.value_id));
  }
  // An error naming the first element not holding `v`'s data, or "".
  std::string read(const Operand& v, int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end) const {
    if (v.element_bytes != 4) return {};
    for (int64_t r = row_begin; r < row_end; ++r)
      for (int64_t c = col_begin; c < col_end; ++c) {
        const int32_t owner = owner_[size_t(index(v, r, c))];
        if (owner != v.value_id)
          return owner < 0 ? fmt::format("reads value {} row {} column {} before any task wrote it", v.value_id, r, c)
                           : fmt::format("reads value {} row {} column {}, which value {} has overwritten", v.value_id,
                                         r, c, owner);
      }
    return {};
  }
  void append(const void* pool) { appended_[pool] = true; }
  bool appended(const void* pool) const { return appended_.count(pool) > 0; }

 private:
  int64_t index(const Operand& v, int64_t row, int64_t col) const { return (v.data - arena_) + row * v.width + col; }

  const float* arena_;
  std::vector<int32_t> owner_;
  std::map<const void*, bool> appended_;
};

std::string tileText(const MegakernelTask& t) {
  if (t.kind == StepKind::kGemm) return fmt::format("columns [{}, {})", t.column_begin, t.column_end);
  if (t.kind == StepKind::kPagedAttention) return fmt::format("sequence {}, kv head {}", t.sequence, t.kv_head);
  return "whole step";
}

}  // namespace

Status CpuExecutor::forwardTasks(const BatchInputs& in, std::span<float> logits_out, const MegakernelPlan& plan,
                                 uint64_t seed) {
  KILN_RETURN_IF_ERROR(checkBatch(in, logits_out));
  const int64_t n = int64_t(in.tokens.size());
  const int64_t b = int64_t(in.kv_lens.size());
  if (b > plan.max_batch)
    return makeError("megakernel: the batch has {} sequences, the plan's tasks cover {} (max_batch)", b,
                     plan.max_batch);
  // The plan against this executor's steps (the loader checked it against
  // the entry; this executor may have been made from another plan).
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const MegakernelTask& t = plan.tasks[i];
    if (t.step < 0 || size_t(t.step) >= steps_.size() || steps_[size_t(t.step)].kind != t.kind ||
        (t.kind == StepKind::kGemm && t.column_end > steps_[size_t(t.step)].width))
      return makeError("megakernel: tasks[{}] ({} step {}, {}) is not a tile of this executor's forward entry", i,
                       stepKindName(t.kind), t.step, tileText(t));
    for (const MegakernelWait& w : t.waits)
      if (w.counter < 0 || size_t(w.counter) >= plan.counters.size())
        return makeError("megakernel: tasks[{}] waits on counter {}, which the plan does not have", i, w.counter);
    for (int64_t c : t.signals)
      if (c < 0 || size_t(c) >= plan.counters.size())
        return makeError("megakernel: tasks[{}] signals counter {}, which the plan does not have", i, c);
  }
  resetFreshStates(in);
  for (int64_t t = 0; t < n; ++t) scratch_slots_[t] = in.slot_mapping[size_t(t)];

  ArenaShadow shadow(arena_, arena_bytes_ / 4);
  auto rowsOf = [&](const Operand& v) { return v.per_sequence ? b : n; };
  auto readAll = [&](const Operand& v) {
    return v.kind == StepArg::Kind::kValue ? shadow.read(v, 0, rowsOf(v), 0, v.width) : std::string();
  };
  thread_local std::vector<float> tile_out;

  // Runs one task after checking its reads; records its writes.
  auto run = [&](const MegakernelTask& task) -> Status {
    const BoundStep& s = steps_[size_t(task.step)];
    std::string unread;
    if (task.kind == StepKind::kGemm) {
      const Operand& x = s.args[0];
      const Operand& y = s.results[0];
      if (unread = readAll(x); !unread.empty()) return makeError("{}", unread);
      const int64_t rows = rowsOf(x), c0 = task.column_begin, c1 = task.column_end, cols = c1 - c0;
      const BoundWeight& w = *s.args[1].weight;
      const auto* w_rows = static_cast<const uint8_t*>(w.data) + c0 * rowBytes(w.type, s.k);
      const float* bias = s.args.size() == 3 ? reinterpret_cast<const float*>(s.args[2].weight->data) + c0 : nullptr;
      if (tile_out.size() < size_t(rows * cols)) tile_out.resize(size_t(rows * cols));
      KILN_RETURN_IF_ERROR(linear(x.data, rows, s.k, w_rows, w.type, cols, bias, tile_out.data()));
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(y.data + r * y.width + c0, tile_out.data() + r * cols, size_t(cols) * 4);
      shadow.write(y, 0, rows, c0, c1);
      return {};
    }
    if (task.kind == StepKind::kPagedAttention) {
      if (task.sequence >= b) return {};  // a slot past the batch's sequences
      const int group = s.heads / s.kv_heads;
      const int64_t first = in.query_start[size_t(task.sequence)], last = in.query_start[size_t(task.sequence) + 1];
      const int64_t col0 = task.kv_head * group * s.head_dim, col1 = col0 + group * s.head_dim;
      if (unread = shadow.read(s.args[0], first, last, col0, col1); !unread.empty()) return makeError("{}", unread);
      for (size_t p : {1u, 2u})
        if (!shadow.appended(s.args[p].pool))
          return makeError("reads the layer's {} pool before this call's keys and values are appended",
                           p == 1 ? "K" : "V");
      PagedAttentionArgs args = pagedAttentionArgs(s, in, n, b);
      args.seq_begin = int(task.sequence);
      args.seq_end = int(task.sequence) + 1;
      args.head_begin = int(task.kv_head) * group;
      args.head_end = args.head_begin + group;
      KILN_RETURN_IF_ERROR(pagedAttention(args));
      shadow.write(s.results[0], first, last, col0, col1);
      return {};
    }
    for (const Operand& arg : s.args)
      if (unread = readAll(arg); !unread.empty()) return makeError("{}", unread);
    KILN_RETURN_IF_ERROR(runStep(s, in, n, b));
    for (const Operand& result : s.results) shadow.write(result, 0, rowsOf(result), 0, result.width);
    if (s.kind == StepKind::kRopeKvAppend || s.kind == StepKind::kKvAppend)
      for (const Operand& arg : s.args)
        if (arg.kind == StepArg::Kind::kPool) shadow.append(arg.pool);
    return {};
  };

  // The scheduler: a task is ready once each counter it waits on has
  // reached its value; the next task is a random ready one.
  const size_t tasks = plan.tasks.size();
  std::vector<int64_t> counters(plan.counters.size(), 0), unmet(tasks, 0);
  std::vector<std::vector<std::pair<size_t, int64_t>>> waiters(plan.counters.size());
  std::vector<size_t> ready;
  for (size_t i = 0; i < tasks; ++i) {
    for (const MegakernelWait& w : plan.tasks[i].waits) {
      waiters[size_t(w.counter)].push_back({i, w.value});
      ++unmet[i];
    }
    if (unmet[i] == 0) ready.push_back(i);
  }
  std::mt19937_64 rng(seed);
  for (size_t done = 0; done < tasks; ++done) {
    if (ready.empty())
      return makeError("megakernel: {} of {} tasks ran and none of the rest can start: their waits are never met",
                       done, tasks);
    const size_t pick = std::uniform_int_distribution<size_t>(0, ready.size() - 1)(rng);
    const size_t i = ready[pick];
    ready[pick] = ready.back();
    ready.pop_back();
    const MegakernelTask& task = plan.tasks[i];
    if (Status status = run(task); !status.ok())
      return makeError("megakernel: tasks[{}] ({} step {}, {}; the {} task run): {}", i, stepKindName(task.kind),
                       task.step, tileText(task), done + 1, status.error().message);
    for (int64_t c : task.signals) {
      const int64_t value = ++counters[size_t(c)];
      for (auto [waiter, target] : waiters[size_t(c)])
        if (target == value && --unmet[waiter] == 0) ready.push_back(waiter);
    }
  }

  const int64_t rows = logits_per_sequence_ ? b : n;
  // The logits are the entry's output: every element must have been written.
  const Operand* logits = nullptr;
  for (const BoundStep& s : steps_)
    for (const Operand& r : s.results)
      if (r.data == logits_) logits = &r;
  if (logits)
    if (std::string unread = shadow.read(*logits, 0, rows, 0, vocab_); !unread.empty())
      return makeError("megakernel: the logits are incomplete after every task ran: {}", unread);
  std::memcpy(logits_out.data(), logits_, size_t(rows * vocab_) * 4);
  if (head_step_) last_hidden_ = {head_step_->args[0].data, size_t(rows * hidden_size_)};
  return {};
}

}  // namespace kiln::cpu
