#include "runtime/artifact/megakernel_graph.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "models/formats/tensor_info.h"

namespace kiln {
namespace {

// What one step reads and writes: arena storage (bytes per row of the
// token budget, [begin, end) of the value's storage root), the values
// themselves (for the producer of each read), and pools (KV pools and
// state slots, by (kind, layer, role)).
struct StepAccess {
  std::vector<int64_t> read_values, written_values;  // storage roots
  std::vector<std::pair<int64_t, int64_t>> read_bytes, written_bytes;
  std::vector<int64_t> read_pools, written_pools;
};

int64_t rootOf(const Entry& entry, int64_t id) {
  const EntryValue* v = entry.findValue(id);
  for (size_t hops = 0; v && v->view_of && hops <= entry.values.size(); ++hops) v = entry.findValue(*v->view_of);
  return v ? v->id : id;
}

std::pair<int64_t, int64_t> storageOf(const Entry& entry, int64_t root) {
  const EntryValue* v = entry.findValue(root);
  return v ? std::pair{v->offset, v->offset + v->row_bytes} : std::pair<int64_t, int64_t>{0, 0};
}

int64_t poolKey(const StepArg& arg) {
  const int64_t role = arg.kind == StepArg::Kind::kPool ? int64_t(arg.role) : 2 + int64_t(arg.state_role);
  return int64_t(arg.layer) * 4 + role;
}

StepAccess accessOf(const Entry& entry, const Step& step) {
  StepAccess a;
  for (const StepArg& arg : step.args) {
    if (arg.kind == StepArg::Kind::kValue) {
      const int64_t root = rootOf(entry, arg.id);
      a.read_values.push_back(root);
      a.read_bytes.push_back(storageOf(entry, root));
    } else if (arg.kind == StepArg::Kind::kPool || arg.kind == StepArg::Kind::kState) {
      // rope_kv_append and kv_append only write their pools, attention only
      // reads them; the state-space steps read and update their slots.
      const bool appends = step.kind == StepKind::kRopeKvAppend || step.kind == StepKind::kKvAppend;
      if (!appends) a.read_pools.push_back(poolKey(arg));
      if (step.kind != StepKind::kPagedAttention) a.written_pools.push_back(poolKey(arg));
    }
  }
  for (int64_t id : step.results) {
    const int64_t root = rootOf(entry, id);
    a.written_values.push_back(root);
    a.written_bytes.push_back(storageOf(entry, root));
  }
  return a;
}

bool overlap(std::pair<int64_t, int64_t> a, std::pair<int64_t, int64_t> b) {
  return a.first < b.second && b.first < a.second;
}

// The steps each step must wait for, before dropping implied ones.
std::vector<std::vector<int64_t>> stepDependencies(const Entry& entry) {
  const size_t steps = entry.steps.size();
  std::vector<StepAccess> access;
  for (const Step& step : entry.steps) access.push_back(accessOf(entry, step));
  std::map<int64_t, int64_t> producer;                  // storage root -> the step writing it
  std::map<int64_t, int64_t> pool_writer;               // pool -> its last writer
  std::map<int64_t, std::vector<int64_t>> pool_readers;  // pool -> readers since that write
  std::vector<std::vector<int64_t>> deps(steps);
  for (size_t j = 0; j < steps; ++j) {
    const StepAccess& a = access[j];
    std::vector<int64_t>& d = deps[j];
    // Reads after writes: the producer of each value read.
    for (int64_t v : a.read_values)
      if (auto it = producer.find(v); it != producer.end()) d.push_back(it->second);
    // Writes after reads and writes of the same arena bytes (another value
    // that lived there before).
    for (size_t i = 0; i < j; ++i) {
      const StepAccess& earlier = access[i];
      bool conflict = false;
      for (auto w : a.written_bytes) {
        for (auto r : earlier.read_bytes) conflict = conflict || overlap(w, r);
        for (auto r : earlier.written_bytes) conflict = conflict || overlap(w, r);
      }
      if (conflict) d.push_back(int64_t(i));
    }
    // Pools and state slots: reads after the last write, writes after it and
    // after the reads since.
    for (int64_t p : a.read_pools)
      if (auto it = pool_writer.find(p); it != pool_writer.end()) d.push_back(it->second);
    for (int64_t p : a.written_pools) {
      if (auto it = pool_writer.find(p); it != pool_writer.end()) d.push_back(it->second);
      for (int64_t r : pool_readers[p]) d.push_back(r);
    }
    for (int64_t p : a.read_pools) pool_readers[p].push_back(int64_t(j));
    for (int64_t p : a.written_pools) {
      pool_writer[p] = int64_t(j);
      pool_readers[p].clear();
    }
    for (int64_t v : a.written_values) producer[v] = int64_t(j);
    std::sort(d.begin(), d.end());
    d.erase(std::unique(d.begin(), d.end()), d.end());
    d.erase(std::remove(d.begin(), d.end(), int64_t(j)), d.end());
  }
  return deps;
}

// Drops each dependency that another one implies; `deps` point backwards.
std::vector<std::vector<int64_t>> reduce(const std::vector<std::vector<int64_t>>& deps) {
  const size_t steps = deps.size();
  std::vector<std::vector<bool>> closure(steps, std::vector<bool>(steps, false));
  std::vector<std::vector<int64_t>> kept(steps);
  for (size_t j = 0; j < steps; ++j) {
    std::vector<int64_t> d = deps[j];
    std::sort(d.rbegin(), d.rend());  // later steps imply more
    for (int64_t i : d) {
      if (closure[j][size_t(i)]) continue;
      kept[j].push_back(i);
      closure[j][size_t(i)] = true;
      for (size_t k = 0; k < steps; ++k)
        if (closure[size_t(i)][k]) closure[j][k] = true;
    }
    std::sort(kept[j].begin(), kept[j].end());
  }
  return kept;
}

// The tasks of one step, in tile order.
std::vector<MegakernelTask> cut(const Step& step, int64_t index, const MegakernelOptions& options) {
  std::vector<MegakernelTask> tasks;
  MegakernelTask task;
  task.kind = step.kind;
  task.step = index;
  if (step.kind == StepKind::kGemm) {
    const int64_t n = step.as<GemmParams>().n;
    for (int64_t c = 0; c < n; c += options.tile) {
      task.column_begin = c;
      task.column_end = std::min(n, c + options.tile);
      tasks.push_back(task);
    }
  } else if (step.kind == StepKind::kPagedAttention) {
    for (int64_t s = 0; s < options.max_batch; ++s)
      for (int64_t g = 0; g < step.as<PagedAttentionParams>().attn.kv_heads; ++g) {
        task.sequence = s;
        task.kv_head = g;
        tasks.push_back(task);
      }
  } else {
    tasks.push_back(task);
  }
  return tasks;
}

}  // namespace

int64_t weightRowBytes(const std::string& type, int64_t k) {
  if (type == "int8" || type == "fp8e4m3") return k;
  if (type == "int4") return k / 2;
  std::string upper = type;
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  const auto parsed = formats::parseElementTypeName(upper);
  if (!parsed || formats::blockSize(*parsed) <= 0) return 0;
  return k / formats::blockSize(*parsed) * formats::blockBytes(*parsed);
}

int64_t taskWeightBytes(const MegakernelTask& task, const Entry& entry) {
  if (task.kind != StepKind::kGemm || task.step < 0 || size_t(task.step) >= entry.steps.size()) return 0;
  const GemmParams& g = entry.steps[size_t(task.step)].as<GemmParams>();
  const int64_t columns = task.column_end - task.column_begin;
  int64_t row = weightRowBytes(g.weight_type, g.k);
  if (g.scales) row += (g.group > 0 ? g.k / g.group : 1) * 4;
  return columns * row + (g.bias ? columns * 4 : 0);
}

Result<MegakernelPlan> planMegakernel(const Entry& entry, const MegakernelOptions& options) {
  if (entry.steps.empty()) return makeError("entry '{}' has no steps to cut into tasks", entry.name);
  if (options.max_batch < 1 || options.max_batch > 64)
    return makeError("megakernel max_batch {} is out of range, expected 1 to 64", options.max_batch);
  if (options.tile < 1) return makeError("megakernel tile {} is out of range, expected >= 1", options.tile);
  const std::vector<std::vector<int64_t>> deps = reduce(stepDependencies(entry));
  const size_t steps = entry.steps.size();
  std::vector<int64_t> level(steps, 0);
  for (size_t j = 0; j < steps; ++j)
    for (int64_t i : deps[j]) level[j] = std::max(level[j], level[size_t(i)] + 1);

  MegakernelPlan plan;
  plan.max_batch = options.max_batch;
  plan.tile = options.tile;
  std::vector<std::vector<MegakernelTask>> by_step;
  for (size_t j = 0; j < steps; ++j) by_step.push_back(cut(entry.steps[j], int64_t(j), options));
  for (size_t j = 0; j < steps; ++j)
    plan.counters.push_back({int64_t(j), int64_t(j), int64_t(by_step[j].size())});
  struct Listed {
    MegakernelTask task;
    int64_t level, weight_bytes, tile_index;
  };
  std::vector<Listed> listed;
  for (size_t j = 0; j < steps; ++j) {
    for (size_t t = 0; t < by_step[j].size(); ++t) {
      MegakernelTask task = by_step[j][t];
      for (int64_t i : deps[j]) task.waits.push_back({i, plan.counters[size_t(i)].final});
      task.signals.push_back(int64_t(j));
      const int64_t bytes = taskWeightBytes(task, entry);
      listed.push_back({std::move(task), level[j], bytes, int64_t(t)});
    }
  }
  std::stable_sort(listed.begin(), listed.end(), [](const Listed& a, const Listed& b) {
    if (a.level != b.level) return a.level < b.level;
    if (a.weight_bytes != b.weight_bytes) return a.weight_bytes > b.weight_bytes;
    if (a.task.step != b.task.step) return a.task.step < b.task.step;
    return a.tile_index < b.tile_index;
  });
  for (Listed& l : listed) plan.tasks.push_back(std::move(l.task));
  KILN_RETURN_IF_ERROR(checkMegakernel(plan, entry, "megakernel of entry '" + entry.name + "'"));
  return plan;
}

CriticalPath criticalPath(const MegakernelPlan& plan, const Entry& entry) {
  // Per counter, the longest chain (and heaviest stream) ending in a task
  // that signals it; the list is topological, so one pass suffices.
  std::vector<int64_t> depth(plan.counters.size(), 0), bytes(plan.counters.size(), 0);
  CriticalPath path;
  for (const MegakernelTask& t : plan.tasks) {
    int64_t d = 0, b = 0;
    for (const MegakernelWait& w : t.waits) {
      if (w.counter < 0 || size_t(w.counter) >= depth.size()) continue;
      d = std::max(d, depth[size_t(w.counter)]);
      b = std::max(b, bytes[size_t(w.counter)]);
    }
    d += 1;
    b += taskWeightBytes(t, entry);
    for (int64_t c : t.signals) {
      if (c < 0 || size_t(c) >= depth.size()) continue;
      depth[size_t(c)] = std::max(depth[size_t(c)], d);
      bytes[size_t(c)] = std::max(bytes[size_t(c)], b);
    }
    path.tasks = std::max(path.tasks, d);
    path.weight_bytes = std::max(path.weight_bytes, b);
  }
  return path;
}

}  // namespace kiln
