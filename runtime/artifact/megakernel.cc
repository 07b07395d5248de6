#include "runtime/artifact/megakernel.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "runtime/artifact/manifest.h"

namespace kiln {

using json = nlohmann::json;

bool isTiledKind(StepKind kind) { return kind == StepKind::kGemm || kind == StepKind::kPagedAttention; }

json toJson(const MegakernelPlan& plan) {
  json counters = json::array();
  for (const MegakernelCounter& c : plan.counters)
    counters.push_back({{"id", c.id}, {"step", c.step}, {"final", c.final}});
  json tasks = json::array();
  for (const MegakernelTask& t : plan.tasks) {
    json task{{"kind", std::string(stepKindName(t.kind))}, {"step", t.step}};
    if (t.kind == StepKind::kGemm) task["columns"] = {t.column_begin, t.column_end};
    if (t.kind == StepKind::kPagedAttention) {
      task["sequence"] = t.sequence;
      task["kv_head"] = t.kv_head;
    }
    json waits = json::array();
    for (const MegakernelWait& w : t.waits) waits.push_back({{"counter", w.counter}, {"value", w.value}});
    task["waits"] = std::move(waits);
    task["signals"] = t.signals;
    tasks.push_back(std::move(task));
  }
  return {{"max_batch", plan.max_batch}, {"tile", plan.tile}, {"counters", std::move(counters)},
          {"tasks", std::move(tasks)}};
}

namespace {

// An integer field of `object` at `path`, at least `min`.
Result<int64_t> integerField(const json& object, const std::string& path, const char* key, int64_t min) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer())
    return makeError("{}.{}: expected an integer{}", path, key,
                     it == object.end() ? " (missing)" : fmt::format(", got {}", it->type_name()));
  const int64_t value = it->get<int64_t>();
  if (value < min) return makeError("{}.{}: expected an integer >= {}, got {}", path, key, min, value);
  return value;
}

Result<const json*> arrayField(const json& object, const std::string& path, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_array())
    return makeError("{}.{}: expected an array{}", path, key,
                     it == object.end() ? " (missing)" : fmt::format(", got {}", it->type_name()));
  return &*it;
}

#define KILN_TAKE(var, expr)                            \
  auto var##_result = (expr);                           \
  if (!var##_result.ok()) return var##_result.error();  \
  auto var = var##_result.take()

Result<MegakernelTask> taskFromJson(const json& t, const std::string& path) {
  if (!t.is_object()) return makeError("{}: expected an object, got {}", path, t.type_name());
  MegakernelTask task;
  const auto kind = t.find("kind");
  const std::optional<StepKind> parsed =
      kind != t.end() && kind->is_string() ? parseStepKind(kind->get<std::string>()) : std::nullopt;
  if (!parsed) return makeError("{}.kind: expected a step kind ({})", path, supportedStepKinds());
  task.kind = *parsed;
  KILN_TAKE(step, integerField(t, path, "step", 0));
  task.step = step;
  if (task.kind == StepKind::kGemm) {
    const auto columns = t.find("columns");
    if (columns == t.end() || !columns->is_array() || columns->size() != 2 || !(*columns)[0].is_number_integer() ||
        !(*columns)[1].is_number_integer())
      return makeError("{}.columns: expected [begin, end], two integers (a gemm task's output columns)", path);
    task.column_begin = (*columns)[0].get<int64_t>();
    task.column_end = (*columns)[1].get<int64_t>();
  }
  if (task.kind == StepKind::kPagedAttention) {
    KILN_TAKE(sequence, integerField(t, path, "sequence", 0));
    KILN_TAKE(kv_head, integerField(t, path, "kv_head", 0));
    task.sequence = sequence;
    task.kv_head = kv_head;
  }
  KILN_TAKE(waits, arrayField(t, path, "waits"));
  for (size_t i = 0; i < waits->size(); ++i) {
    const json& w = (*waits)[i];
    const std::string p = fmt::format("{}.waits[{}]", path, i);
    if (!w.is_object()) return makeError("{}: expected {{\"counter\": id, \"value\": n}}, got {}", p, w.type_name());
    KILN_TAKE(counter, integerField(w, p, "counter", 0));
    KILN_TAKE(value, integerField(w, p, "value", 1));
    task.waits.push_back({counter, value});
  }
  KILN_TAKE(signals, arrayField(t, path, "signals"));
  for (size_t i = 0; i < signals->size(); ++i) {
    if (!(*signals)[i].is_number_integer() || (*signals)[i].get<int64_t>() < 0)
      return makeError("{}.signals[{}]: expected a counter id (an integer >= 0)", path, i);
    task.signals.push_back((*signals)[i].get<int64_t>());
  }
  return task;
}

// The tile of `task` as text, for errors: "columns [0, 64)", "sequence 1, kv head 0", "the whole step".
std::string tileText(const MegakernelTask& task) {
  if (task.kind == StepKind::kGemm) return fmt::format("columns [{}, {})", task.column_begin, task.column_end);
  if (task.kind == StepKind::kPagedAttention) return fmt::format("sequence {}, kv head {}", task.sequence, task.kv_head);
  return "the whole step";
}

}  // namespace

Status checkMegakernel(const MegakernelPlan& plan, const Entry& entry, const std::string& path) {
  if (plan.max_batch < 1) return makeError("{}.max_batch: expected an integer >= 1, got {}", path, plan.max_batch);
  if (plan.tile < 1) return makeError("{}.tile: expected an integer >= 1, got {}", path, plan.tile);
  const int64_t steps = int64_t(entry.steps.size());
  for (size_t i = 0; i < plan.counters.size(); ++i) {
    const MegakernelCounter& c = plan.counters[i];
    if (c.id != int64_t(i))
      return makeError("{}.counters[{}].id: expected {} (counters are listed by id), got {}", path, i, i, c.id);
    if (c.step >= steps)
      return makeError("{}.counters[{}].step: {} is not a step of the entry (it has {})", path, i, c.step, steps);
  }
  const int64_t counters = int64_t(plan.counters.size());

  // Tiles: each task inside its step, each step covered exactly once.
  // Per step: the gemm columns taken, the (sequence, kv head) cells taken,
  // or the count of whole-step tasks.
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  using Cells = std::set<std::pair<int64_t, int64_t>>;
  std::vector<Ranges> columns(static_cast<size_t>(steps), Ranges{});
  std::vector<Cells> cells(static_cast<size_t>(steps), Cells{});
  std::vector<int64_t> whole(size_t(steps), 0);
  std::vector<int64_t> signalled(size_t(counters), 0);
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const MegakernelTask& t = plan.tasks[i];
    const std::string p = fmt::format("{}.tasks[{}]", path, i);
    if (t.step >= steps) return makeError("{}.step: {} is not a step of the entry (it has {})", p, t.step, steps);
    const Step& step = entry.steps[size_t(t.step)];
    if (t.kind != step.kind)
      return makeError("{}.kind: {} but step {} is a {} step", p, stepKindName(t.kind), t.step, stepKindName(step.kind));
    if (t.kind == StepKind::kGemm) {
      const int64_t n = step.as<GemmParams>().n;
      if (t.column_begin < 0 || t.column_end <= t.column_begin || t.column_end > n)
        return makeError("{}.columns: [{}, {}) is not a column range inside step {}'s {} output columns", p,
                         t.column_begin, t.column_end, t.step, n);
      columns[size_t(t.step)].push_back({t.column_begin, t.column_end});
    } else if (t.kind == StepKind::kPagedAttention) {
      const int64_t kv_heads = step.as<PagedAttentionParams>().attn.kv_heads;
      if (t.sequence >= plan.max_batch || t.kv_head >= kv_heads)
        return makeError("{}: sequence {} and kv head {} are outside max_batch {} and step {}'s {} kv heads", p,
                         t.sequence, t.kv_head, plan.max_batch, t.step, kv_heads);
      if (!cells[size_t(t.step)].insert({t.sequence, t.kv_head}).second)
        return makeError("{}: step {}'s sequence {}, kv head {} is already another task's", p, t.step, t.sequence,
                         t.kv_head);
    } else {
      ++whole[size_t(t.step)];
    }
    for (size_t j = 0; j < t.waits.size(); ++j) {
      const MegakernelWait& w = t.waits[j];
      if (w.counter >= counters)
        return makeError("{}.waits[{}].counter: {} is not a counter (there are {})", p, j, w.counter, counters);
    }
    for (size_t j = 0; j < t.signals.size(); ++j) {
      if (t.signals[j] >= counters)
        return makeError("{}.signals[{}]: {} is not a counter (there are {})", p, j, t.signals[j], counters);
      ++signalled[size_t(t.signals[j])];
    }
  }
  for (int64_t s = 0; s < steps; ++s) {
    const Step& step = entry.steps[size_t(s)];
    if (step.kind == StepKind::kGemm) {
      auto& ranges = columns[size_t(s)];
      std::sort(ranges.begin(), ranges.end());
      int64_t covered = 0;
      for (auto [begin, end] : ranges) {
        if (begin != covered)
          return makeError("{}: step {} (gemm) has its columns [{}, {}) {}", path, s, std::min(begin, covered),
                           std::max(begin, covered), begin > covered ? "in no task" : "in two tasks");
        covered = end;
      }
      if (covered != step.as<GemmParams>().n)
        return makeError("{}: step {} (gemm) has its columns [{}, {}) in no task", path, s, covered,
                         step.as<GemmParams>().n);
    } else if (step.kind == StepKind::kPagedAttention) {
      const int64_t expected = plan.max_batch * step.as<PagedAttentionParams>().attn.kv_heads;
      if (int64_t(cells[size_t(s)].size()) != expected)
        return makeError("{}: step {} (paged_attention) has {} (sequence, kv head) tasks, expected {} (max_batch {} x "
                         "{} kv heads)",
                         path, s, cells[size_t(s)].size(), expected, plan.max_batch,
                         step.as<PagedAttentionParams>().attn.kv_heads);
    } else if (whole[size_t(s)] != 1) {
      return makeError("{}: step {} ({}) is run by {} tasks, expected exactly one", path, s, stepKindName(step.kind),
                       whole[size_t(s)]);
    }
  }
  for (int64_t c = 0; c < counters; ++c)
    if (signalled[size_t(c)] != plan.counters[size_t(c)].final)
      return makeError("{}.counters[{}].final: {} but {} tasks signal it", path, c, plan.counters[size_t(c)].final,
                       signalled[size_t(c)]);

  // The list order: SMs take tasks in it and wait, so each wait must be met
  // by tasks listed before it; a wait beyond the counter's final value is
  // never met.
  std::vector<int64_t> reached(size_t(counters), 0);
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const MegakernelTask& t = plan.tasks[i];
    for (size_t j = 0; j < t.waits.size(); ++j) {
      const MegakernelWait& w = t.waits[j];
      const MegakernelCounter& c = plan.counters[size_t(w.counter)];
      if (w.value > c.final)
        return makeError("{}.tasks[{}].waits[{}]: counter {} (step {}) never reaches {}: its final value is {}", path,
                         i, j, w.counter, c.step, w.value, c.final);
      if (reached[size_t(w.counter)] < w.value)
        return makeError("{}.tasks[{}].waits[{}]: counter {} (step {}) reaches {} only with tasks listed after this "
                         "one (step {}, {}); the SMs take tasks in list order, so this one could wait forever",
                         path, i, j, w.counter, c.step, w.value, t.step, tileText(t));
    }
    for (int64_t c : t.signals) ++reached[size_t(c)];
  }
  return {};
}

Result<MegakernelPlan> megakernelFromJson(const json& section, const Entry& entry, const std::string& path) {
  if (!section.is_object()) return makeError("{}: expected an object, got {}", path, section.type_name());
  MegakernelPlan plan;
  KILN_TAKE(max_batch, integerField(section, path, "max_batch", 1));
  KILN_TAKE(tile, integerField(section, path, "tile", 1));
  plan.max_batch = max_batch;
  plan.tile = tile;
  KILN_TAKE(counters, arrayField(section, path, "counters"));
  for (size_t i = 0; i < counters->size(); ++i) {
    const json& c = (*counters)[i];
    const std::string p = fmt::format("{}.counters[{}]", path, i);
    if (!c.is_object()) return makeError("{}: expected an object, got {}", p, c.type_name());
    KILN_TAKE(id, integerField(c, p, "id", 0));
    KILN_TAKE(step, integerField(c, p, "step", 0));
    KILN_TAKE(final_value, integerField(c, p, "final", 1));
    plan.counters.push_back({id, step, final_value});
  }
  KILN_TAKE(tasks, arrayField(section, path, "tasks"));
  for (size_t i = 0; i < tasks->size(); ++i) {
    KILN_TAKE(task, taskFromJson((*tasks)[i], fmt::format("{}.tasks[{}]", path, i)));
    plan.tasks.push_back(std::move(task));
  }
  KILN_RETURN_IF_ERROR(checkMegakernel(plan, entry, path));
  return plan;
}

}  // namespace kiln
