// Property tests of the engine's scheduling and KV bookkeeping under
// thousands of random arrivals, lengths, priorities, parallel samples and
// cancellations in a pool small enough to force preemption.
//
// The backend is a shadow of a real one at the same boundary: forward
// writes each token's (token, position) into the slot the batch maps it to
// and reads every sequence's context back through its block-table row, as
// attention does, and its logits pick a next token that hashes that whole
// context. A wrong slot, a stale or foreign block, a missed copy on write or
// a cached block of other tokens changes the context read, hence the next
// token: every greedy output must equal the one computed from the tokens
// alone.
#include "runtime/engine/scheduler.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "runtime/backend/backend.h"
#include "runtime/engine/engine.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kiln {
namespace {

constexpr int kVocab = 64;

// The next token after `context`, whose first token is at `first_position`:
// a hash of every (token, position).
int32_t nextToken(std::span<const int32_t> context, size_t first_position = 0) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < context.size(); ++i) {
    h ^= uint64_t(context[i]) * 1315423911u + first_position + i;
    h *= 1099511628211ull;
  }
  return int32_t(1 + (h >> 17) % (kVocab - 1));
}

// The greedy tokens a prompt produces alone; with a sliding `window`, each
// from the last `window` tokens only.
std::vector<int32_t> soloTokens(std::vector<int32_t> tokens, int count, int64_t window = 0) {
  std::vector<int32_t> out;
  for (int i = 0; i < count; ++i) {
    const size_t first = window > 0 && int64_t(tokens.size()) > window ? tokens.size() - size_t(window) : 0;
    out.push_back(nextToken(std::span(tokens).subspan(first), first));
    tokens.push_back(out.back());
  }
  return out;
}

class ShadowBackend final : public Backend {
 public:
  // `window` > 0: attention reads only each query's last `window` keys (and
  // the engine may free the blocks before them).
  ShadowBackend(int64_t blocks, int page_size, int64_t max_tokens, int64_t window = 0)
      : window_(window),
        pool_(BlockPool::create({.layers = 1, .num_blocks = blocks, .page_size = page_size, .kv_heads = 1,
                                 .head_dim = 1},
                                KvStorage::kElsewhere)
                  .take()),
        slots_(size_t(blocks * page_size), -1),
        max_tokens_(max_tokens) {}

  Status forward(const BatchInputs& in, std::span<float> logits) override {
    BatchLimits limits{max_tokens_, kVocab, pool_.numBlocks(), pool_.config().page_size};
    KILN_RETURN_IF_ERROR(checkBatchInputs(in, limits, logits.size()));
    // Appends first (every token's keys and values), then attention.
    for (size_t i = 0; i < in.tokens.size(); ++i) {
      // A slot written must belong to a block no one else reads: the
      // sequence's own (reference count 1, not cached).
      const int32_t block = in.slot_mapping[i] / pool_.config().page_size;
      if (pool_.refCount(block) != 1 || pool_.isCached(block))
        return makeError("token {} writes block {} held {} times (cached: {})", i, block, pool_.refCount(block),
                         pool_.isCached(block));
      slots_[size_t(in.slot_mapping[i])] = int64_t(in.tokens[i]) << 32 | int64_t(in.positions[i]);
    }
    const int page = pool_.config().page_size;
    std::fill(logits.begin(), logits.end(), 0.0f);
    for (size_t b = 0; b + 1 < in.query_start.size(); ++b) {
      std::vector<int32_t> context;
      const int32_t first = window_ > 0 ? std::max<int32_t>(0, in.kv_lens[b] - int32_t(window_)) : 0;
      for (int32_t p = first; p < in.kv_lens[b]; ++p) {
        const int64_t slot = int64_t(in.block_tables[b * size_t(in.max_blocks) + size_t(p / page)]) * page + p % page;
        const int64_t value = slots_[size_t(slot)];
        if (value < 0 || int32_t(value & 0xffffffff) != p)
          return makeError("sequence {} reads position {} from slot {} holding position {}", b, p, slot,
                           value < 0 ? -1 : int32_t(value & 0xffffffff));
        context.push_back(int32_t(value >> 32));
      }
      logits[b * kVocab + size_t(nextToken(context, size_t(first)))] = 1.0f;
    }
    ++forwards_;
    return {};
  }
  Status copyBlocks(std::span<const BlockCopy> copies) override {
    const int page = pool_.config().page_size;
    for (const BlockCopy& c : copies) {
      std::copy_n(slots_.begin() + int64_t(c.from) * page, page, slots_.begin() + int64_t(c.to) * page);
      ++copies_;
    }
    return {};
  }
  BlockPool& blockPool() override { return pool_; }
  int64_t vocabSize() const override { return kVocab; }
  int64_t maxTokens() const override { return max_tokens_; }
  std::string name() const override { return "shadow"; }
  bool honorsSlidingWindows() const override { return window_ > 0; }

  int64_t copies() const { return copies_; }

 private:
  int64_t window_ = 0;
  BlockPool pool_;
  std::vector<int64_t> slots_;  // token << 32 | position, -1 never written
  int64_t max_tokens_;
  int64_t forwards_ = 0, copies_ = 0;
};

Tokenizer shadowTokenizer() {
  TokenizerVocab v;
  v.model = TokenizerModel::kByteLevelBpe;
  v.pre = PreTokenizerKind::kGpt2;
  for (int i = 0; i < kVocab; ++i) v.tokens.push_back(std::string(1, char('0' + i)));
  v.token_types.assign(v.tokens.size(), TokenType::kNormal);
  return Tokenizer::create(std::move(v)).take();
}

struct Harness {
  ShadowBackend* backend = nullptr;
  std::unique_ptr<Engine> engine;
  std::map<int64_t, std::vector<int32_t>> tokens;

  Harness(int64_t blocks, int page, int64_t budget, int max_sequences, int64_t context = 256,
          bool prefix_cache = true, int64_t window = 0) {
    auto owned = std::make_unique<ShadowBackend>(blocks, page, budget, window);
    backend = owned.get();
    EngineOptions options;
    options.max_sequences = max_sequences;
    options.prefix_cache = prefix_cache;
    engine = Engine::fromBackend(std::move(owned), shadowTokenizer(), context, options, window).take();
  }
  Result<int64_t> submit(std::vector<int32_t> prompt, int max_tokens, int priority = 0, int n = 1) {
    GenerationRequest r;
    r.prompt_tokens = std::move(prompt);
    r.sampling.max_tokens = max_tokens;
    r.sampling.n = n;
    r.priority = priority;
    return engine->submit(r, [this](int64_t id, int32_t token, std::string_view) {
      if (token >= 0) tokens[id].push_back(token);
    });
  }
  // No block is held by anything but the prefix cache.
  void expectNoLeaks() const {
    const EngineMetrics m = engine->metrics();
    EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total)
        << m.kv_blocks_free << " free and " << m.kv_blocks_cached << " cached of " << m.kv_blocks_total;
    EXPECT_EQ(backend->blockPool().numUsed(), 0);
  }
};

struct Submitted {
  std::vector<int32_t> prompt;
  int max_tokens = 0;
  int n = 1;
  int priority = 0;
};

// Random workload: prompts that often share one of a few long prefixes,
// random lengths and priorities, a few parallel-sampling requests, random
// cancellations, arrivals spread over the steps.
void runRandomWorkload(uint32_t seed, int requests, int64_t blocks, int page, int64_t budget, int max_sequences,
                       bool prefix_cache, int64_t window = 0) {
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::vector<int32_t>> prefixes(4);
  for (auto& p : prefixes)
    for (int i = uniform(page, 5 * page); i > 0; --i) p.push_back(uniform(1, kVocab - 1));

  Harness h(blocks, page, budget, max_sequences, 256, prefix_cache, window);
  std::map<int64_t, Submitted> live;
  std::map<int64_t, int> first_of_group;  // first completion id -> n
  std::set<int64_t> cancelled;
  int submitted = 0;
  int64_t steps = 0;
  while (submitted < requests || !h.engine->idle()) {
    for (int arrivals = uniform(0, 3); arrivals > 0 && submitted < requests; --arrivals, ++submitted) {
      Submitted s;
      if (uniform(0, 2) > 0) s.prompt = prefixes[size_t(uniform(0, 3))];
      for (int i = uniform(s.prompt.empty() ? 1 : 0, 2 * page); i > 0; --i) s.prompt.push_back(uniform(1, kVocab - 1));
      s.max_tokens = uniform(1, 3 * page);
      s.priority = uniform(0, 2);
      s.n = uniform(0, 9) == 0 ? uniform(2, 3) : 1;
      auto id = h.submit(s.prompt, s.max_tokens, s.priority, s.n);
      ASSERT_TRUE(id.ok()) << id.error().message;
      for (int c = 0; c < s.n; ++c) live[*id + c] = s;
      first_of_group[*id] = s.n;
    }
    if (uniform(0, 19) == 0 && !live.empty()) {
      auto it = std::next(live.begin(), uniform(0, int(live.size()) - 1));
      h.engine->cancel(it->first);
      const int group = first_of_group.count(it->first) ? first_of_group[it->first] : 1;
      for (int c = 0; c < group; ++c) cancelled.insert(it->first + c);
    }
    ASSERT_TRUE(h.engine->step().ok());
    ASSERT_LT(++steps, 200000) << "no progress";
  }
  ASSERT_TRUE(h.engine->step().ok());  // retire the last
  for (const auto& [id, s] : live) {
    const RequestStats* stats = h.engine->stats(id);
    ASSERT_NE(stats, nullptr) << "request " << id;
    const std::vector<int32_t> expected = soloTokens(s.prompt, s.max_tokens, window);
    const std::vector<int32_t>& got = h.tokens[id];
    if (cancelled.count(id) && stats->finish == FinishReason::kCancelled) {
      ASSERT_LE(got.size(), expected.size());
      EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin())) << "request " << id << " (cancelled)";
      continue;
    }
    EXPECT_EQ(stats->finish, FinishReason::kLength) << "request " << id << ": " << stats->error;
    EXPECT_EQ(got, expected) << "request " << id << " (n " << s.n << ", prompt " << s.prompt.size()
                             << ", preempted " << stats->preemptions << ")";
  }
  h.expectNoLeaks();
  const EngineMetrics m = h.engine->metrics();
  EXPECT_GT(m.preemptions, 0) << "the pool never ran dry: the test does not exercise preemption";
  EXPECT_GT(h.backend->copies(), 0) << "no copy on write happened";
  if (prefix_cache) EXPECT_GT(m.prefix_hit_tokens, 0);
  else EXPECT_EQ(m.prefix_hit_tokens, 0);
}

TEST(SchedulerPropertyTest, RandomWorkloadsKeepSoloOutputsAndLeakNothing) {
  for (uint32_t seed = 1; seed <= 10; ++seed)
    runRandomWorkload(seed, 500, /*blocks=*/40, /*page=*/4, /*budget=*/48, /*max_sequences=*/12, true);
}

// Every layer sliding: blocks before the window freed and reused while the
// prefix cache, forks and preemption run too.
TEST(SchedulerPropertyTest, RandomWorkloadsUnderASlidingWindow) {
  for (uint32_t seed = 21; seed <= 24; ++seed)
    runRandomWorkload(seed, 300, /*blocks=*/20, /*page=*/4, /*budget=*/16, /*max_sequences=*/12, true, /*window=*/10);
}

TEST(SchedulerPropertyTest, WithoutThePrefixCacheToo) {
  for (uint32_t seed = 11; seed <= 13; ++seed)
    runRandomWorkload(seed, 300, /*blocks=*/40, /*page=*/4, /*budget=*/48, /*max_sequences=*/12, false);
}

// Every running sequence crosses a block boundary in the same step with no
// free block: the scheduler must preempt, not wait forever.
TEST(SchedulerPropertyTest, AllSequencesNeedingABlockAtOnceDoNotLivelock) {
  Harness h(/*blocks=*/8, /*page=*/4, /*budget=*/64, /*max_sequences=*/4, 256, /*prefix_cache=*/false);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> ids;
  for (int s = 0; s < 4; ++s) {
    prompts.push_back({int32_t(1 + s), 7, 9, int32_t(20 + s)});  // one full block each
    auto id = h.submit(prompts.back(), 12);
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  int steps = 0;
  while (!h.engine->idle()) {
    ASSERT_TRUE(h.engine->step().ok());
    ASSERT_LT(++steps, 1000) << "livelock";
  }
  ASSERT_TRUE(h.engine->step().ok());
  for (size_t s = 0; s < ids.size(); ++s) {
    EXPECT_EQ(h.engine->stats(ids[s])->finish, FinishReason::kLength);
    EXPECT_EQ(h.tokens[ids[s]], soloTokens(prompts[s], 12)) << "sequence " << s;
  }
  EXPECT_GT(h.engine->metrics().preemptions, 0);
  h.expectNoLeaks();
}

// The youngest of the lowest priority is preempted first, and a higher
// priority is admitted first.
TEST(SchedulerPropertyTest, PriorityOrdersAdmissionAndPreemption) {
  Harness h(/*blocks=*/6, /*page=*/4, /*budget=*/64, /*max_sequences=*/2, 256, false);
  std::vector<int32_t> prompt = {1, 2, 3, 4};
  auto low = h.submit(prompt, 8, /*priority=*/0);
  auto high = h.submit(prompt, 8, /*priority=*/5);
  auto mid = h.submit(prompt, 8, /*priority=*/1);
  ASSERT_TRUE(low.ok() && high.ok() && mid.ok());
  ASSERT_TRUE(h.engine->step().ok());
  // Two slots: high and mid run, low waits although it came first.
  EXPECT_EQ(h.tokens[*high].size(), 1u);
  EXPECT_EQ(h.tokens[*mid].size(), 1u);
  EXPECT_EQ(h.tokens[*low].size(), 0u);
  ASSERT_TRUE(h.engine->runUntilIdle().ok());
  for (int64_t id : {*low, *high, *mid}) EXPECT_EQ(h.tokens[id], soloTokens(prompt, 8));
  // 6 blocks, two sequences of up to 3 blocks each: mid (lower) is the one
  // preempted if anyone is.
  EXPECT_EQ(h.engine->stats(*high)->preemptions, 0);
  h.expectNoLeaks();
}

// A second turn (the first prompt, its answer and more) reuses the first
// turn's computed blocks.
TEST(SchedulerPropertyTest, PrefixIsReusedAndItsPrefillSkipped) {
  Harness h(/*blocks=*/64, /*page=*/4, /*budget=*/64, /*max_sequences=*/4);
  std::vector<int32_t> turn1;
  for (int i = 0; i < 18; ++i) turn1.push_back(1 + i % 50);
  auto first = h.submit(turn1, 4);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(h.engine->runUntilIdle().ok());
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), h.tokens[*first].begin(), h.tokens[*first].end());
  turn2.insert(turn2.end(), {5, 6, 7});
  auto second = h.submit(turn2, 4);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(h.engine->runUntilIdle().ok());
  // Turn 1 computed 18 + 3 tokens: 5 full blocks cached.
  EXPECT_EQ(h.engine->stats(*second)->cached_prompt_tokens, 20);
  EXPECT_EQ(h.tokens[*second], soloTokens(turn2, 4));
  const EngineMetrics m = h.engine->metrics();
  EXPECT_EQ(m.prefix_hit_tokens, 20);
  EXPECT_EQ(m.prefix_queried_tokens, 18 + 25);
  // Turn 2 computed 25 + 3 tokens: 7 full blocks, 5 of them turn 1's.
  EXPECT_EQ(m.kv_blocks_cached, 7);
  h.expectNoLeaks();
}

TEST(SchedulerPropertyTest, ParallelSamplesShareThePromptAndCopyOnWrite) {
  Harness h(/*blocks=*/32, /*page=*/4, /*budget=*/64, /*max_sequences=*/4, 256, false);
  std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9};  // the last block half full
  auto id = h.submit(prompt, 6, 0, /*n=*/3);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(h.engine->step().ok());
  // One prefill for all three: two prompt blocks held three times over.
  EXPECT_EQ(h.backend->blockPool().numUsed(), 2);
  ASSERT_TRUE(h.engine->runUntilIdle().ok());
  for (int c = 0; c < 3; ++c) EXPECT_EQ(h.tokens[*id + c], soloTokens(prompt, 6)) << "completion " << c;
  EXPECT_EQ(h.backend->copies(), 2);  // two of the three copy the shared half block
  h.expectNoLeaks();
}

TEST(SchedulerPropertyTest, CancellationReturnsBlocksAtOnce) {
  Harness h(/*blocks=*/16, /*page=*/4, /*budget=*/64, /*max_sequences=*/4, 256, false);
  auto id = h.submit({1, 2, 3, 4, 5, 6, 7, 8, 9}, 20);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(h.engine->step().ok());
  EXPECT_EQ(h.backend->blockPool().numUsed(), 3);
  h.engine->cancel(*id);
  EXPECT_EQ(h.backend->blockPool().numUsed(), 0);
  EXPECT_EQ(h.engine->stats(*id)->finish, FinishReason::kCancelled);
  h.engine->cancel(*id);  // again, after it ended: harmless
  EXPECT_TRUE(h.engine->idle());
}

// With a sliding window on every layer, blocks wholly before a sequence's
// window go back to the pool as it grows (others may reuse them: the shadow
// backend reads only the window), so sequences far longer than their share
// of the pool run without preemption, each with its solo output.
TEST(SchedulerPropertyTest, BlocksBeforeASlidingWindowAreFreedAndReused) {
  constexpr int64_t kWindow = 8;
  Harness h(/*blocks=*/16, /*page=*/4, /*budget=*/16, /*max_sequences=*/4, 256, /*prefix_cache=*/true, kWindow);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> ids;
  for (int s = 0; s < 4; ++s) {
    prompts.push_back({int32_t(1 + s), 5, 9, 2, int32_t(30 + s), 7});
    auto id = h.submit(prompts.back(), 100);  // 106 tokens: 27 blocks alone, the pool has 16
    ASSERT_TRUE(id.ok()) << id.error().message;
    ids.push_back(*id);
  }
  int64_t most_held = 0;
  while (!h.engine->idle()) {
    ASSERT_TRUE(h.engine->step().ok());
    most_held = std::max(most_held, h.backend->blockPool().numUsed());
  }
  ASSERT_TRUE(h.engine->step().ok());
  for (size_t s = 0; s < ids.size(); ++s) {
    EXPECT_EQ(h.engine->stats(ids[s])->finish, FinishReason::kLength) << h.engine->stats(ids[s])->error;
    EXPECT_EQ(h.tokens[ids[s]], soloTokens(prompts[s], 100, kWindow)) << "sequence " << s;
  }
  EXPECT_EQ(h.engine->metrics().preemptions, 0);
  // Each holds the window's blocks and the one being filled: at most 4 each.
  EXPECT_LE(most_held, 16);
  h.expectNoLeaks();
}

// A cancellation that races with completion (from the callback of the last
// token, or after the end) changes nothing, and cancelling from a callback
// mid-request ends it at the next step.
TEST(SchedulerPropertyTest, CancellationRacingCompletionIsHarmless) {
  Harness h(/*blocks=*/16, /*page=*/4, /*budget=*/64, /*max_sequences=*/4, 256, false);
  GenerationRequest r;
  r.prompt_tokens = {1, 2, 3};
  r.sampling.max_tokens = 5;
  std::vector<int32_t> last_tokens, mid_tokens;
  int64_t last_id = 0, mid_id = 0;
  auto last = h.engine->submit(r, [&](int64_t id, int32_t token, std::string_view) {
    if (token < 0) return;
    last_tokens.push_back(token);
    if (last_tokens.size() == 5) h.engine->cancel(id);  // the request's final token
  });
  auto mid = h.engine->submit(r, [&](int64_t id, int32_t token, std::string_view) {
    if (token < 0) return;
    mid_tokens.push_back(token);
    if (mid_tokens.size() == 2) h.engine->cancel(id);
  });
  ASSERT_TRUE(last.ok() && mid.ok());
  last_id = *last;
  mid_id = *mid;
  ASSERT_TRUE(h.engine->runUntilIdle().ok());
  EXPECT_EQ(h.engine->stats(last_id)->finish, FinishReason::kLength);
  EXPECT_EQ(last_tokens, soloTokens(r.prompt_tokens, 5));
  EXPECT_EQ(h.engine->stats(mid_id)->finish, FinishReason::kCancelled);
  EXPECT_EQ(mid_tokens.size(), 2u);
  h.engine->cancel(last_id);
  h.engine->cancel(12345);  // never existed
  EXPECT_EQ(h.engine->stats(last_id)->finish, FinishReason::kLength);
  h.expectNoLeaks();
}

}  // namespace
}  // namespace kiln
