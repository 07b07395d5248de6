// The scheduler with a state-space model's state slots
// (docs/design/state-space.md): admission needs a free slot as well as KV
// blocks, a sequence keeps one slot while it runs, preemption and
// retirement give it back (a preempted sequence is recomputed from its
// tokens into a fresh, zeroed slot), and the prefix cache is off.
#include <gtest/gtest.h>

#include <set>

#include "runtime/engine/scheduler.h"

namespace kiln {
namespace {

constexpr int kPage = 4;

std::unique_ptr<Sequence> sequence(int64_t id, int64_t prompt) {
  auto seq = std::make_unique<Sequence>(kPage);
  seq->id = id;
  seq->arrival = uint64_t(id);
  for (int64_t i = 0; i < prompt; ++i) seq->tokens.push_back(int32_t(1 + (id + i) % 50));
  seq->prompt_len = prompt;
  return seq;
}

BlockPool pool(int64_t blocks) {
  return BlockPool::create({.layers = 1, .num_blocks = blocks, .page_size = kPage, .kv_heads = 1, .head_dim = 1},
                           KvStorage::kElsewhere)
      .take();
}

StatePool states(int64_t slots) { return StatePool::create({{{3, 8, 16}}, slots, 4}, true).take(); }

// Runs a step and appends one sampled token to every slice that finished its pending tokens.
ScheduledStep step(Scheduler& s) {
  ScheduledStep st = s.schedule();
  s.commit(st);
  for (const ScheduledSlice& slice : st.slices)
    if (slice.seq->pending() == 0) slice.seq->tokens.push_back(7);
  return st;
}

TEST(SchedulerStateSlots, AdmitsOnlyWithAFreeSlotAndReusesRetiredOnes) {
  BlockPool kv = pool(64);
  StatePool slots = states(2);
  Scheduler s(kv, {.max_sequences = 8, .max_batch_tokens = 64, .prefix_cache = true, .state_pool = &slots});
  EXPECT_EQ(s.prefixCache(), nullptr);  // off for SSM models
  for (int64_t id = 1; id <= 3; ++id) s.enqueue(sequence(id, 6));
  ScheduledStep first = step(s);
  ASSERT_EQ(first.slices.size(), 2u);  // two slots, though eight sequences and the blocks would fit
  EXPECT_EQ(s.numWaiting(), 1);
  EXPECT_EQ(slots.numFree(), 0);
  std::set<int32_t> held = {s.stateSlot(1), s.stateSlot(2)};
  EXPECT_EQ(held, (std::set<int32_t>{0, 1}));
  EXPECT_EQ(s.stateSlot(3), -1);

  const int32_t freed = s.stateSlot(1);
  s.find(1)->finished = true;
  EXPECT_EQ(s.retire().size(), 1u);
  EXPECT_EQ(s.stateSlot(1), -1);
  EXPECT_EQ(slots.numFree(), 1);
  step(s);
  EXPECT_EQ(s.numWaiting(), 0);
  EXPECT_EQ(s.stateSlot(3), freed);
}

TEST(SchedulerStateSlots, PreemptionReleasesTheSlotAndRecomputesFromTheTokens) {
  // 4 blocks of 4: two 7-token prompts fit; both growing past 8 tokens do not.
  BlockPool kv = pool(4);
  StatePool slots = states(2);
  Scheduler s(kv, {.max_sequences = 4, .max_batch_tokens = 64, .prefix_cache = false, .state_pool = &slots});
  s.enqueue(sequence(1, 7));
  s.enqueue(sequence(2, 7));
  step(s);
  ASSERT_EQ(s.numRunning(), 2);
  for (int i = 0; i < 3 && s.preemptions() == 0; ++i) step(s);
  ASSERT_GE(s.preemptions(), 1);
  // The preempted one (least precedence: id 2) is waiting without a slot and will prefill all its tokens again.
  ASSERT_EQ(s.numWaiting(), 1);
  const Sequence& victim = *s.waiting().front();
  EXPECT_EQ(victim.id, 2);
  EXPECT_EQ(s.stateSlot(2), -1);
  EXPECT_EQ(victim.computed, 0);
  EXPECT_EQ(slots.numFree(), 1);
  EXPECT_NE(s.stateSlot(1), -1);
  // Once the first finishes, the victim comes back with a slot and its whole context pending.
  s.find(1)->finished = true;
  s.retire();
  const int64_t context = int64_t(victim.tokens.size());
  ScheduledStep again = s.schedule();
  ASSERT_EQ(again.slices.size(), 1u);
  EXPECT_EQ(again.slices[0].seq->id, 2);
  EXPECT_EQ(again.slices[0].begin, 0);
  EXPECT_EQ(again.slices[0].count, context);
  EXPECT_NE(s.stateSlot(2), -1);
}

}  // namespace
}  // namespace kiln
