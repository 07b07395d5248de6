// The prefix cache's tree, references and eviction order, on a pool that
// keeps only the bookkeeping.
#include "runtime/kv/prefix_cache.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

constexpr int kPage = 4;

BlockPool makePool(int64_t blocks) {
  return BlockPool::create({.layers = 1, .num_blocks = blocks, .page_size = kPage, .kv_heads = 1, .head_dim = 1},
                           KvStorage::kElsewhere)
      .take();
}

std::vector<int32_t> iota(int count, int32_t first) {
  std::vector<int32_t> v;
  for (int i = 0; i < count; ++i) v.push_back(first + i);
  return v;
}

// A sequence of `tokens` with every full block computed, cached, and then
// released by the sequence.
void cacheSequence(PrefixCache& cache, BlockPool& pool, const std::vector<int32_t>& tokens) {
  BlockTable table(kPage);
  ASSERT_TRUE(table.append(pool, int64_t(tokens.size())).ok());
  auto tail = cache.insert(pool, nullptr, 0, int64_t(tokens.size()) / kPage, tokens, table);
  ASSERT_TRUE(tail.ok()) << tail.error().message;
  table.release(pool);
}

TEST(PrefixCacheTest, MatchesTheLongestCachedBlockPrefix) {
  BlockPool pool = makePool(16);
  PrefixCache cache(kPage);
  const std::vector<int32_t> tokens = iota(10, 1);  // 2 full blocks + 2 tokens
  cacheSequence(cache, pool, tokens);
  EXPECT_EQ(cache.cachedBlocks(), 2);
  EXPECT_EQ(pool.numCachedOnly(), 2);
  EXPECT_EQ(pool.numUsed(), 0);
  EXPECT_EQ(pool.numFree(), 14);  // the partial third block went back

  std::vector<int32_t> query = iota(8, 1);
  query.push_back(99);
  auto hit = cache.match(pool, query, 8);
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(pool.numCachedOnly(), 0);  // the caller holds both now
  EXPECT_EQ(pool.refCount(hit[0]), 2);
  EXPECT_TRUE(cache.match(pool, query, 1).size() == 1u);  // capped by max_blocks
  // A different first block: no match at all, even if later tokens agree.
  std::vector<int32_t> other = query;
  other[0] = 42;
  EXPECT_TRUE(cache.match(pool, other, 8).empty());
}

TEST(PrefixCacheTest, EvictsUnreferencedLeavesLeastRecentlyUsedFirst) {
  BlockPool pool = makePool(8);
  PrefixCache cache(kPage);
  std::vector<int32_t> a = iota(8, 1), b = iota(4, 1);
  b.insert(b.end(), {50, 51, 52, 53});  // shares a's first block
  cacheSequence(cache, pool, a);
  cacheSequence(cache, pool, b);
  EXPECT_EQ(cache.cachedBlocks(), 3);
  // Use a's path again: b's leaf is now the least recently used.
  auto hit = cache.match(pool, a, 2);
  for (int32_t block : hit) ASSERT_TRUE(pool.release(block).ok());
  EXPECT_EQ(cache.evict(pool, 1), 1);
  const std::vector<int32_t> b_hit = cache.match(pool, b, 2);
  EXPECT_EQ(b_hit.size(), 1u);  // only the shared first block is left of b
  // A held block is never evicted: hold a's blocks and ask for everything.
  auto held = cache.match(pool, a, 2);
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(cache.evict(pool, 10), 0);
  for (int32_t block : held) ASSERT_TRUE(pool.release(block).ok());
  for (int32_t block : b_hit) ASSERT_TRUE(pool.release(block).ok());
  // Leaf first, then its parent: both go.
  EXPECT_EQ(cache.evict(pool, 10), 2);
  EXPECT_EQ(cache.cachedBlocks(), 0);
  EXPECT_EQ(pool.numFree(), 8);
}

TEST(PrefixCacheTest, EqualPrefixesComputedTwiceShareOneBlock) {
  BlockPool pool = makePool(8);
  PrefixCache cache(kPage);
  const std::vector<int32_t> tokens = iota(8, 1);
  BlockTable first(kPage), second(kPage);
  ASSERT_TRUE(first.append(pool, 8).ok());
  ASSERT_TRUE(second.append(pool, 8).ok());
  EXPECT_EQ(pool.numFree(), 4);
  ASSERT_TRUE(cache.insert(pool, nullptr, 0, 2, tokens, first).ok());
  ASSERT_TRUE(cache.insert(pool, nullptr, 0, 2, tokens, second).ok());
  // The second table now points at the first's blocks; its own are free.
  EXPECT_EQ(std::vector<int32_t>(first.blocks().begin(), first.blocks().end()),
            std::vector<int32_t>(second.blocks().begin(), second.blocks().end()));
  EXPECT_EQ(pool.numFree(), 6);
  first.release(pool);
  second.release(pool);
  EXPECT_EQ(pool.numCachedOnly(), 2);
  cache.clear(pool);
  EXPECT_EQ(pool.numFree(), 8);
}

TEST(PrefixCacheTest, InsertChecksTheTokensCoverTheBlocks) {
  BlockPool pool = makePool(4);
  PrefixCache cache(kPage);
  BlockTable table(kPage);
  ASSERT_TRUE(table.append(pool, 8).ok());
  auto bad = cache.insert(pool, nullptr, 0, 2, iota(6, 1), table);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("needs tokens up to 8"), std::string::npos) << bad.error().message;
  table.release(pool);
}

}  // namespace
}  // namespace kiln
