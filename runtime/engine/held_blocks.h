// The KV blocks the scheduler's sequences hold, counted from their block
// tables rather than from the pool's own counters, so that
//   free + cached-only + held == total
// checks the pool's bookkeeping (the free list and the cached-only count)
// against what the sequences actually reference: a leaked or doubly freed
// block breaks the sum. Exported as kiln_kv_blocks_used.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln {

class Scheduler;

class HeldBlockCounter {
 public:
  // Distinct blocks held by the queued and running sequences and their
  // parallel-sampling forks (blocks a sliding window released excluded).
  // No allocation once the mark array has grown to the pool's size.
  int64_t count(const Scheduler& scheduler, int64_t num_blocks);

 private:
  std::vector<uint32_t> marks_;  // [num_blocks]: the epoch that last counted the block
  uint32_t epoch_ = 0;
};

}  // namespace kiln
