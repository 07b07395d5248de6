// The megakernel's task graph of one entry (docs/design/megakernel.md): the
// entry's steps cut into tasks at tile granularity, the dependency counters
// they wait on and signal, and the order in which the persistent kernel's
// SMs take them. In manifest.json, an entry's optional "megakernel":
//
//   "megakernel": {
//     "max_batch": 8, "tile": 64,
//     "counters": [ { "id": 0, "step": 0, "final": 1 }, ... ],
//     "tasks": [ { "kind": "gemm", "step": 2, "columns": [0, 64],
//                  "waits": [ { "counter": 1, "value": 1 } ], "signals": [2] },
//                { "kind": "paged_attention", "step": 4, "sequence": 0, "kv_head": 1,
//                  "waits": [...], "signals": [4] }, ... ] }
//
// A gemm task computes output columns [begin, end) of every row; a
// paged_attention task one (sequence slot, kv head): the query heads of that
// head's GQA group, for the rows of sequence slot `sequence` (< max_batch;
// a slot past the batch's sequences does nothing but signal); a task of any
// other kind runs its whole step. A task may start once every counter it
// waits on has reached its value; when done it adds one to each counter it
// signals. `final` is the number of tasks that signal a counter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/artifact/step_params.h"
#include "runtime/support/error.h"

namespace kiln {

struct Entry;

struct MegakernelWait {
  int64_t counter = 0;
  int64_t value = 0;  // the count the counter must have reached
};

struct MegakernelTask {
  StepKind kind = StepKind::kGemm;
  int64_t step = 0;
  // kGemm: output columns [column_begin, column_end).
  int64_t column_begin = 0, column_end = 0;
  // kPagedAttention: the sequence slot and kv head.
  int64_t sequence = 0, kv_head = 0;
  std::vector<MegakernelWait> waits;
  std::vector<int64_t> signals;  // counter ids
};

struct MegakernelCounter {
  int64_t id = 0;
  int64_t step = 0;   // the step whose tasks signal it
  int64_t final = 0;  // its value once every signalling task is done
};

struct MegakernelPlan {
  int64_t max_batch = 0;  // sequence slots the attention tasks cover
  int64_t tile = 0;       // output columns of a gemm task (the last of a step may be narrower)
  std::vector<MegakernelCounter> counters;  // by id
  std::vector<MegakernelTask> tasks;        // in the order the SMs take them
};

// Whether the kind is cut into tasks by tiles (gemm: columns; paged_attention:
// sequence slot and kv head); any other kind is one task.
bool isTiledKind(StepKind kind);

nlohmann::json toJson(const MegakernelPlan& plan);

// Reads and checks `entry`'s megakernel section at JSON path `path`
// ("manifest.json: entries.forward.megakernel"): every task names a step of
// the entry with that step's kind and a tile inside it; together the tiles
// of a step cover it exactly once; every wait and signal names a counter;
// each counter's final value is the number of tasks signalling it, and each
// wait's value is reachable (1 to final); and the list order is one the SMs
// can take without deadlock: each wait is satisfied by the tasks before it
// in the list (which also rules out cycles).
Result<MegakernelPlan> megakernelFromJson(const nlohmann::json& section, const Entry& entry,
                                          const std::string& path);

// The same checks on a plan already in structs (what megakernelFromJson
// runs after reading); `path` prefixes the errors.
Status checkMegakernel(const MegakernelPlan& plan, const Entry& entry, const std::string& path);

}  // namespace kiln
