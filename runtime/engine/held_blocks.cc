#include "runtime/engine/held_blocks.h"

#include <algorithm>

#include "runtime/engine/scheduler.h"

namespace kiln {

int64_t HeldBlockCounter::count(const Scheduler& scheduler, int64_t num_blocks) {
  if (marks_.size() != size_t(num_blocks) || ++epoch_ == 0) {
    marks_.assign(size_t(num_blocks), 0);
    epoch_ = 1;
  }
  int64_t held = 0;
  auto countTable = [&](const Sequence& seq) {
    std::span<const int32_t> blocks = seq.table.blocks();
    const size_t dropped = size_t(std::min<int64_t>(seq.table.droppedBlocks(), int64_t(blocks.size())));
    for (int32_t block : blocks.subspan(dropped)) {
      if (block < 0 || block >= num_blocks || marks_[size_t(block)] == epoch_) continue;
      marks_[size_t(block)] = epoch_;
      ++held;
    }
  };
  for (const auto* queue : {&scheduler.running(), &scheduler.waiting()})
    for (const auto& seq : *queue) {
      countTable(*seq);
      for (const auto& fork : seq->forks) countTable(*fork);
    }
  return held;
}

}  // namespace kiln
