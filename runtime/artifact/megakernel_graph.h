// Cuts an entry's steps into the megakernel's tasks (megakernel.h) and
// derives their dependency counters and the order the SMs take them; the
// compiler's xfmr-plan-megakernel runs it on the entry it lays out, and the
// CPU task interpreter's tests on a loaded plan. MLIR-free.
//
// Tasks. A gemm is cut into tiles of `tile` output columns over all rows
// (a batch of at most max_batch sequences); paged attention into one task
// per (sequence slot, kv head), max_batch slots. Every other step (embedding,
// the norms, rope_kv_append, silu_mul, add, gather_last_tokens) is one task
// of its own: a norm needs whole rows, and rope_kv_append writes the whole
// rows of the KV pools that every attention task of its layer reads; at
// batch <= 8 each is a few KB of activations, one counter hop between the
// tiles around it. (Folding them into the tiles of the GEMM before them is
// the GPU kernel's choice, which changes those tiles, not this protocol.)
//
// Counters. One per step, signalled by each of its tasks; its final value is
// the step's task count. A task waits for the counters of the steps whose
// results it reads (every tile of a GEMM reads all of x; an attention task
// the roped q and the pools its layer's rope_kv_append wrote), of the steps
// that last read or wrote arena bytes its step overwrites (the arena reuses
// rows of values no longer live), and of the earlier writers and readers of
// the pools and state slots it writes, each at the counter's final value.
// A wait implied by another (through the waits of the steps it waits for)
// is dropped.
//
// Order. Tasks are listed by dependency level (the longest chain of waits
// before them), so the list is topological and the SMs never wait on a task
// not yet taken. Within a level the tasks carrying the most weight bytes
// come first: where steps are independent (separate q/k/v projections of
// one norm's output) their weight streams start before the light tasks of
// the level. Across levels the overlap comes from the list itself: an SM
// that takes a tile of the next level while the current one finishes
// streams that tile's weights into its shared-memory ring before its wait
// is met.
#pragma once

#include <cstdint>

#include "runtime/artifact/manifest.h"

namespace kiln {

struct MegakernelOptions {
  int64_t max_batch = 8;  // sequences a step may carry
  int64_t tile = 64;      // output columns of a gemm task
};

// The task graph of `entry`, checked by checkMegakernel. Fails for an
// entry with no steps or options out of range.
Result<MegakernelPlan> planMegakernel(const Entry& entry, const MegakernelOptions& options);

// Bytes of weights the task streams: a gemm tile's rows of W (and bias);
// 0 for other tasks (their weights are a row of a norm or table).
int64_t taskWeightBytes(const MegakernelTask& task, const Entry& entry);

// Bytes of one row of k elements of a plan weight type ("f32", "q4_1",
// "int8", ...); 0 for a type it does not know.
int64_t weightRowBytes(const std::string& type, int64_t k);

// The longest chain of tasks through the waits (its task count), and the
// weight bytes along the chain that streams the most.
struct CriticalPath {
  int64_t tasks = 0;
  int64_t weight_bytes = 0;
};
CriticalPath criticalPath(const MegakernelPlan& plan, const Entry& entry);

}  // namespace kiln
