// The scheduler: which sequences run in the next forward call, and how many
// of their tokens, under the token budget, the sequence limit and the KV
// pool; the prefix cache; preemption when the pool runs dry.
//
// Precedence: higher priority first, then earlier arrival. Each step walks
// the running sequences in precedence order, giving each its next decode
// token or prefill chunk (the budget keeps one token for every decode still
// to come, so a long prefill never starves decoding), then admits waiting
// sequences in precedence order while the limits and the pool allow (the
// head of the queue is never overtaken, so a large request is not starved).
// When a running sequence needs a block and none is free, the prefix cache
// evicts unreferenced blocks, least recently used first; then the sequence
// of least precedence not yet in this step's batch is preempted: its
// computed full blocks go to the prefix cache, its blocks back to the pool,
// and it waits to be recomputed (its tokens so far become its prompt, so its
// output is unchanged). The sequence of highest precedence always runs, so
// there is no livelock.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "runtime/engine/sequence.h"
#include "runtime/kv/block_pool.h"
#include "runtime/kv/prefix_cache.h"
#include "runtime/kv/state_pool.h"

namespace kiln {

struct SchedulerOptions {
  int max_sequences = 16;
  int64_t max_batch_tokens = 512;
  bool prefix_cache = true;
  // Every layer's attention window, when all of them slide (the smallest);
  // 0 otherwise. A sequence's blocks wholly before its window are released
  // as it grows: the backend's kernels never read them again.
  int64_t sliding_window = 0;
  // State-space layers' state slots (docs/design/state-space.md): a
  // sequence is admitted only with a free slot as well as its KV blocks,
  // holds it while it runs, and gives it back when preempted (it is then
  // recomputed from its tokens) or retired. Null for attention-only models.
  // The prefix cache is off with it: a cached prefix's KV blocks do not
  // carry the recurrent state at the prefix's end.
  StatePool* state_pool = nullptr;
};

// Tokens [begin, begin + count) of `seq` in this step's forward.
struct ScheduledSlice {
  Sequence* seq = nullptr;
  int64_t begin = 0;
  int64_t count = 0;
};

struct ScheduledStep {
  std::vector<ScheduledSlice> slices;
  // Copy-on-write block copies to do before the forward writes anything.
  std::vector<BlockCopy> copies;
  // Sequences that cannot run even with the whole pool (an internal limit
  // was wrong); the engine fails them.
  std::vector<Sequence*> unschedulable;
};

class Scheduler {
 public:
  Scheduler(BlockPool& pool, const SchedulerOptions& options);
  ~Scheduler();

  // Queues a new sequence (no blocks yet).
  void enqueue(std::unique_ptr<Sequence> seq);
  // Adds a forked sequence, whose table already holds its blocks, to the
  // running set.
  void addRunning(std::unique_ptr<Sequence> seq);

  // Plans the next forward call. May preempt running sequences (they are
  // back in the waiting queue) and evict cached blocks.
  ScheduledStep schedule();
  // After the forward ran: the slices' tokens are computed; their newly
  // full blocks enter the prefix cache.
  void commit(const ScheduledStep& step);
  // Removes finished and cancelled sequences, running or waiting, returning
  // their blocks to the pool (computed full blocks stay cached); the engine
  // records their ends.
  std::vector<std::unique_ptr<Sequence>> retire();

  // Makes `blocks` blocks free, evicting cached ones; false if it cannot.
  bool makeFree(int64_t blocks);

  Sequence* find(int64_t id);
  bool empty() const { return waiting_.empty() && running_.empty(); }
  int64_t numWaiting() const { return int64_t(waiting_.size()); }
  int64_t numRunning() const { return int64_t(running_.size()); }
  int64_t preemptions() const { return preemptions_; }
  int64_t slidingWindow() const { return options_.sliding_window; }
  // The state slot `seq_id` holds while it runs, or -1.
  int32_t stateSlot(int64_t seq_id) const;
  const PrefixCache* prefixCache() const { return cache_ ? &*cache_ : nullptr; }
  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  const std::vector<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }

 private:
  // Blocks taken from the pool or the cache's cached-only blocks.
  int64_t available() const { return pool_.numFree() + pool_.numCachedOnly(); }
  // Grows `seq`'s table by `count` slots, evicting and then preempting
  // running sequences after index `self` (self last) as needed. False if it
  // cannot (then `seq` may itself have been preempted).
  bool reserve(size_t self, int64_t count, ScheduledStep& step);
  // Releases the sequence's blocks (caching its computed full blocks).
  void releaseKv(Sequence& seq);
  void cacheComputedBlocks(Sequence& seq);
  // Releases the blocks wholly before the window of seq's next query.
  void dropBeforeWindow(Sequence& seq);
  // Moves running_[index] back to the waiting queue, its KV released.
  void preempt(size_t index);
  void insertWaiting(std::unique_ptr<Sequence> seq);
  // Takes a state slot for `seq` (state-space models); false if none is free.
  bool acquireStateSlot(const Sequence& seq);

  BlockPool& pool_;
  SchedulerOptions options_;
  std::optional<PrefixCache> cache_;
  // Both in precedence order.
  std::vector<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  int64_t preemptions_ = 0;
  std::unordered_map<int64_t, int32_t> state_slots_;  // sequence id -> its state slot
};

// Whether `a` runs before `b`: higher priority, then earlier arrival.
bool precedes(const Sequence& a, const Sequence& b);

}  // namespace kiln
