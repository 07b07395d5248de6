// HeldBlockCounter against the pool's counters: shared prefix blocks count
// once, cached-only blocks not at all, and the sum free + cached + held
// stays the pool's size through admission, sharing and retirement.
#include "runtime/engine/held_blocks.h"

#include <gtest/gtest.h>

#include "runtime/engine/scheduler.h"

namespace kiln {
namespace {

constexpr int kPage = 4;

std::unique_ptr<Sequence> sequence(int64_t id, std::vector<int32_t> prompt) {
  auto seq = std::make_unique<Sequence>(kPage);
  seq->id = id;
  seq->arrival = uint64_t(id);
  seq->tokens = std::move(prompt);
  seq->prompt_len = int64_t(seq->tokens.size());
  return seq;
}

void expectBalanced(const BlockPool& pool, Scheduler& s, HeldBlockCounter& counter) {
  const int64_t held = counter.count(s, pool.numBlocks());
  EXPECT_EQ(pool.numFree() + pool.numCachedOnly() + held, pool.numBlocks());
  EXPECT_EQ(held, pool.numUsed());
}

TEST(HeldBlockCounter, BalancesThePoolThroughSharingAndRetirement) {
  BlockPool pool = BlockPool::create({.layers = 1, .num_blocks = 32, .page_size = kPage, .kv_heads = 1, .head_dim = 1},
                                     KvStorage::kElsewhere)
                       .take();
  Scheduler s(pool, {.max_sequences = 8, .max_batch_tokens = 64, .prefix_cache = true});
  HeldBlockCounter counter;
  EXPECT_EQ(counter.count(s, pool.numBlocks()), 0);
  const std::vector<int32_t> shared = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // three full blocks

  s.enqueue(sequence(1, shared));
  ScheduledStep first = s.schedule();
  s.commit(first);
  expectBalanced(pool, s, counter);
  EXPECT_EQ(counter.count(s, pool.numBlocks()), 3);

  // A second prompt with the same opening shares its cached blocks.
  std::vector<int32_t> longer = shared;
  longer.insert(longer.end(), {20, 21, 22, 23, 24});
  s.enqueue(sequence(2, longer));
  ScheduledStep second = s.schedule();
  s.commit(second);
  expectBalanced(pool, s, counter);
  EXPECT_LT(counter.count(s, pool.numBlocks()), 3 + 5);  // the shared blocks count once

  for (int64_t id : {1, 2}) s.find(id)->finished = true;
  s.retire();
  expectBalanced(pool, s, counter);
  EXPECT_EQ(counter.count(s, pool.numBlocks()), 0);
  EXPECT_GT(pool.numCachedOnly(), 0);  // what the prefix cache kept
  EXPECT_EQ(pool.numCachedOnly(), s.prefixCache()->cachedBlocks());
}

}  // namespace
}  // namespace kiln
