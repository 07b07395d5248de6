#include "runtime/engine/scheduler.h"

#include <algorithm>

namespace kiln {

bool precedes(const Sequence& a, const Sequence& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  if (a.arrival != b.arrival) return a.arrival < b.arrival;
  return a.id < b.id;
}

Scheduler::Scheduler(BlockPool& pool, const SchedulerOptions& options) : pool_(pool), options_(options) {
  if (options.prefix_cache && options.state_pool == nullptr) cache_.emplace(pool.config().page_size);
}

int32_t Scheduler::stateSlot(int64_t seq_id) const {
  auto it = state_slots_.find(seq_id);
  return it == state_slots_.end() ? -1 : it->second;
}

bool Scheduler::acquireStateSlot(const Sequence& seq) {
  if (options_.state_pool == nullptr || state_slots_.count(seq.id)) return true;
  auto slot = options_.state_pool->acquire();
  if (!slot.ok()) return false;
  state_slots_[seq.id] = *slot;
  return true;
}

Scheduler::~Scheduler() {
  for (auto& seq : running_) seq->table.release(pool_);
  for (auto& seq : waiting_) seq->table.release(pool_);
  if (cache_) cache_->clear(pool_);
}

void Scheduler::insertWaiting(std::unique_ptr<Sequence> seq) {
  auto at = std::upper_bound(waiting_.begin(), waiting_.end(), seq,
                             [](const auto& a, const auto& b) { return precedes(*a, *b); });
  waiting_.insert(at, std::move(seq));
}

void Scheduler::enqueue(std::unique_ptr<Sequence> seq) { insertWaiting(std::move(seq)); }

void Scheduler::addRunning(std::unique_ptr<Sequence> seq) {
  // A fork's slot: admission kept one free for each fork of the group.
  (void)acquireStateSlot(*seq);
  running_.push_back(std::move(seq));
}

Sequence* Scheduler::find(int64_t id) {
  for (auto& s : running_) if (s->id == id) return s.get();
  for (auto& s : waiting_) {
    if (s->id == id) return s.get();
    for (auto& f : s->forks) if (f->id == id) return f.get();
  }
  for (auto& s : running_)
    for (auto& f : s->forks) if (f->id == id) return f.get();
  return nullptr;
}

bool Scheduler::makeFree(int64_t blocks) {
  if (pool_.numFree() >= blocks) return true;
  if (cache_) cache_->evict(pool_, blocks - pool_.numFree());
  return pool_.numFree() >= blocks;
}

void Scheduler::cacheComputedBlocks(Sequence& seq) {
  // A table with dropped blocks no longer holds its cached path (its tail
  // may be evicted): it caches nothing more until it is recomputed.
  if (!cache_ || seq.table.droppedBlocks() > 0) return;
  const int64_t full = std::min<int64_t>(seq.computed / pool_.config().page_size, int64_t(seq.table.blocks().size()));
  if (full <= seq.cached_blocks) return;
  auto tail = cache_->insert(pool_, seq.cache_tail, seq.cached_blocks, full, seq.tokens, seq.table);
  if (!tail.ok()) return;  // the table and tokens disagree: leave it uncached
  seq.cache_tail = *tail;
  seq.cached_blocks = full;
}

void Scheduler::dropBeforeWindow(Sequence& seq) {
  if (options_.sliding_window <= 0) return;
  // The next query, at position `computed`, reads keys (computed - W, computed].
  const int64_t first_read = seq.computed - options_.sliding_window + 1;
  const int64_t droppable = first_read / pool_.config().page_size;
  if (droppable > seq.table.droppedBlocks()) (void)seq.table.dropPrefix(pool_, droppable);
}

void Scheduler::releaseKv(Sequence& seq) {
  cacheComputedBlocks(seq);
  seq.table.release(pool_);
  seq.cache_tail = nullptr;
  seq.cached_blocks = 0;
  seq.computed = 0;
  if (auto it = state_slots_.find(seq.id); it != state_slots_.end()) {
    (void)options_.state_pool->release(it->second);
    state_slots_.erase(it);
  }
}

void Scheduler::preempt(size_t index) {
  std::unique_ptr<Sequence> seq = std::move(running_[index]);
  running_.erase(running_.begin() + int64_t(index));
  releaseKv(*seq);
  ++seq->stats.preemptions;
  ++preemptions_;
  insertWaiting(std::move(seq));
}

bool Scheduler::reserve(size_t self, int64_t count, ScheduledStep& step) {
  Sequence& seq = *running_[self];
  const int64_t needed = seq.table.blocksNeeded(pool_, count);
  // Victims come from the back: least precedence, not yet in this batch.
  while (!makeFree(needed) && running_.size() > self + 1) preempt(running_.size() - 1);
  if (!makeFree(needed)) {
    if (self == 0) {
      // Alone with the whole pool and still short: it can never run.
      step.unschedulable.push_back(&seq);
      return false;
    }
    preempt(self);
    return false;
  }
  return seq.table.append(pool_, count, &step.copies).ok();
}

ScheduledStep Scheduler::schedule() {
  ScheduledStep step;
  std::stable_sort(running_.begin(), running_.end(), [](const auto& a, const auto& b) { return precedes(*a, *b); });
  int64_t budget = options_.max_batch_tokens;
  // Decode tokens of the sequences after `i`, which the budget keeps room for.
  auto decodesAfter = [&](size_t i) {
    return std::count_if(running_.begin() + int64_t(i) + 1, running_.end(),
                         [](const auto& s) { return s->pending() == 1; });
  };
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence& seq = *running_[i];
    const int64_t pending = seq.pending();
    const int64_t count = std::min(pending, budget - (pending == 1 ? 0 : int64_t(decodesAfter(i))));
    if (count <= 0) {
      ++i;
      continue;
    }
    const size_t before = running_.size();
    if (!reserve(i, count, step)) {
      // Preempted itself (then running_[i] is the next one) or cannot run.
      if (running_.size() == before) ++i;
      continue;
    }
    step.slices.push_back({&seq, seq.computed, count});
    budget -= count;
    ++i;
  }

  // Admission: the head of the queue first, while it fits.
  int64_t promised = 0;  // blocks admitted prompts will need beyond this step's
  while (!waiting_.empty() && budget > 0) {
    Sequence& seq = *waiting_.front();
    const int64_t group = 1 + int64_t(seq.forks.size());
    if (int64_t(running_.size()) + group > options_.max_sequences) break;
    if (options_.state_pool != nullptr && options_.state_pool->numFree() < group) break;
    std::vector<int32_t> hit;
    if (cache_ && seq.table.numTokens() == 0) {
      // Leave at least one token to run: its logits give the next token.
      const int64_t max_blocks = (int64_t(seq.tokens.size()) - 1) / pool_.config().page_size;
      hit = cache_->match(pool_, seq.tokens, max_blocks);
      if (Status s = seq.table.adoptPrefix(hit); !s.ok()) {
        for (int32_t b : hit) (void)pool_.release(b);
        hit.clear();
      }
      seq.computed = seq.table.numTokens();
      seq.cached_blocks = 0;
      seq.cache_tail = nullptr;
    }
    const int64_t need_all = seq.table.blocksNeeded(pool_, seq.pending());
    const int64_t count = std::min(seq.pending(), budget);
    const int64_t need_now = seq.table.blocksNeeded(pool_, count);
    if (need_all + promised > available() || !makeFree(need_now)) {
      // Not now: give the hit back (it stays cached) and keep the order.
      seq.table.release(pool_);
      seq.computed = 0;
      break;
    }
    if (!seq.table.append(pool_, count, &step.copies).ok()) {
      seq.table.release(pool_);
      seq.computed = 0;
      break;
    }
    promised += need_all - need_now;
    (void)acquireStateSlot(seq);  // checked free above
    if (cache_) {
      cache_->recordLookup(int64_t(seq.tokens.size()), int64_t(hit.size()) * pool_.config().page_size);
      // The adopted blocks are the cache's: insert continues below them.
      seq.cached_blocks = 0;
    }
    if (!seq.ever_started) {
      seq.ever_started = true;
      seq.started = Clock::now();
      seq.stats.queue_seconds = std::chrono::duration<double>(seq.started - seq.submitted).count();
      seq.stats.cached_prompt_tokens = int64_t(hit.size()) * pool_.config().page_size;
    }
    step.slices.push_back({&seq, seq.computed, count});
    budget -= count;
    running_.push_back(std::move(waiting_.front()));
    waiting_.erase(waiting_.begin());
  }
  return step;
}

void Scheduler::commit(const ScheduledStep& step) {
  for (const ScheduledSlice& s : step.slices) {
    s.seq->computed = s.begin + s.count;
    cacheComputedBlocks(*s.seq);
    dropBeforeWindow(*s.seq);
  }
}

std::vector<std::unique_ptr<Sequence>> Scheduler::retire() {
  std::vector<std::unique_ptr<Sequence>> done;
  auto sweep = [&](std::vector<std::unique_ptr<Sequence>>& list) {
    for (size_t i = 0; i < list.size();) {
      Sequence& seq = *list[i];
      if (seq.finished || seq.cancelled) {
        releaseKv(seq);
        done.push_back(std::move(list[i]));
        list.erase(list.begin() + int64_t(i));
      } else {
        ++i;
      }
    }
  };
  sweep(running_);
  sweep(waiting_);
  return done;
}

}  // namespace kiln
