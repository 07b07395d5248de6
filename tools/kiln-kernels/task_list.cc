#include "tools/kiln-kernels/task_list.h"

#include <fmt/format.h>

#include <cstdio>
#include <map>

#include "runtime/artifact/manifest.h"
#include "runtime/artifact/megakernel_graph.h"

namespace kiln {
namespace {

std::string tileText(const MegakernelTask& t) {
  if (t.kind == StepKind::kGemm) return fmt::format("cols {}-{}", t.column_begin, t.column_end);
  if (t.kind == StepKind::kPagedAttention) return fmt::format("seq {} kvh {}", t.sequence, t.kv_head);
  return "all";
}

std::string waitsText(const MegakernelTask& t) {
  std::string text;
  for (const MegakernelWait& w : t.waits) text += fmt::format("{}c{}>={}", text.empty() ? "" : " ", w.counter, w.value);
  return text.empty() ? "-" : text;
}

std::string signalsText(const MegakernelTask& t) {
  std::string text;
  for (int64_t c : t.signals) text += fmt::format("{}c{}", text.empty() ? "" : " ", c);
  return text.empty() ? "-" : text;
}

void printEntry(const std::string& name, const Entry& entry, const MegakernelPlan& plan) {
  std::printf("entry %s: %zu tasks, %zu counters, max_batch %lld, tile %lld\n", name.c_str(), plan.tasks.size(),
              plan.counters.size(), static_cast<long long>(plan.max_batch), static_cast<long long>(plan.tile));
  std::printf("%6s  %-18s  %5s  %-14s  %12s  %-24s  %s\n", "task", "kind", "step", "tile", "weight_bytes", "waits",
              "signals");
  struct KindTotals {
    int64_t tasks = 0, weight_bytes = 0;
  };
  std::map<std::string, KindTotals> kinds;
  int64_t weight_bytes = 0;
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    const MegakernelTask& t = plan.tasks[i];
    const int64_t bytes = taskWeightBytes(t, entry);
    const std::string kind(stepKindName(t.kind));
    std::printf("%6zu  %-18s  %5lld  %-14s  %12lld  %-24s  %s\n", i, kind.c_str(), static_cast<long long>(t.step),
                tileText(t).c_str(), static_cast<long long>(bytes), waitsText(t).c_str(), signalsText(t).c_str());
    kinds[kind].tasks += 1;
    kinds[kind].weight_bytes += bytes;
    weight_bytes += bytes;
  }
  std::printf("summary of %s:\n", name.c_str());
  for (const auto& [kind, totals] : kinds)
    std::printf("  %-18s  %6lld tasks  %12lld weight bytes\n", kind.c_str(), static_cast<long long>(totals.tasks),
                static_cast<long long>(totals.weight_bytes));
  std::printf("  counters           %6zu (one a step; final values = the step's task count)\n", plan.counters.size());
  const CriticalPath path = criticalPath(plan, entry);
  std::printf("  weight bytes       %lld total, %lld per gemm task at most\n", static_cast<long long>(weight_bytes),
              static_cast<long long>(plan.tasks.empty() ? 0 : [&] {
                int64_t most = 0;
                for (const MegakernelTask& t : plan.tasks) most = std::max(most, taskWeightBytes(t, entry));
                return most;
              }()));
  std::printf("  critical path      %lld tasks, %lld weight bytes along the heaviest chain\n",
              static_cast<long long>(path.tasks), static_cast<long long>(path.weight_bytes));
}

}  // namespace

int printTaskList(const std::string& artifact) {
  auto manifest = Manifest::load(artifact);
  if (!manifest.ok()) {
    std::fprintf(stderr, "kiln-kernels: %s\n", manifest.error().message.c_str());
    return 1;
  }
  bool any = false;
  for (const auto& [name, entry] : manifest->entries) {
    if (!entry.megakernel) continue;
    printEntry(name, entry, *entry.megakernel);
    any = true;
  }
  if (!any) {
    std::fprintf(stderr,
                 "kiln-kernels: %s: no entry has a megakernel section (kiln-compile --megakernel writes one)\n",
                 manifest->path.c_str());
    return 1;
  }
  return 0;
}

}  // namespace kiln
