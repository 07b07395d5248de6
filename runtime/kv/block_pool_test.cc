#include "runtime/kv/block_pool.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

KvPoolConfig smallConfig(int64_t blocks = 4) {
  return KvPoolConfig{.layers = 2, .num_blocks = blocks, .page_size = 4, .kv_heads = 2,
                      .head_dim = 8};
}

TEST(BlockPoolTest, PoolsAreSeparateAndZeroed) {
  for (KvElement element : {KvElement::kF32, KvElement::kF16, KvElement::kBf16}) {
    KvPoolConfig config = smallConfig();
    config.element = element;
    auto pool = BlockPool::create(config);
    ASSERT_TRUE(pool.ok()) << pool.error().message;
    const int64_t bytes = config.poolElems() * (element == KvElement::kF32 ? 4 : 2);
    EXPECT_EQ(config.poolBytes(), bytes);
    auto at = [](void* p) { return static_cast<uint8_t*>(p); };
    EXPECT_EQ(at(pool->values(0)) - at(pool->keys(0)), bytes);
    EXPECT_EQ(at(pool->keys(1)) - at(pool->values(0)), bytes);
    for (int64_t i = 0; i < bytes; ++i) ASSERT_EQ(at(pool->values(1))[i], 0);
  }
}

// int8 and fp8 pools: a byte a value, and an f32 scale per (slot, kv head)
// beside each pool, all zeroed; a block costs about half a bf16 block.
TEST(BlockPoolTest, ScaledPoolsKeepAScalePerSlotAndHead) {
  for (KvElement element : {KvElement::kInt8, KvElement::kFp8E4M3}) {
    KvPoolConfig config = smallConfig();
    config.element = element;
    auto pool = BlockPool::create(config);
    ASSERT_TRUE(pool.ok()) << pool.error().message;
    EXPECT_EQ(config.poolBytes(), config.poolElems());
    EXPECT_EQ(config.scaleElems(), 4 * 4 * 2);
    EXPECT_EQ(config.blockBytes(), 2 * 2 * 4 * 2 * (8 + 4));
    auto at = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
    // Four distinct scale arrays, none overlapping the values or each other.
    std::vector<float*> scales{pool->keyScales(0), pool->valueScales(0), pool->keyScales(1), pool->valueScales(1)};
    for (size_t i = 0; i < scales.size(); ++i) {
      ASSERT_NE(scales[i], nullptr);
      EXPECT_EQ(at(scales[i]) % 4, 0u);
      EXPECT_GE(at(scales[i]), at(pool->values(1)) + uintptr_t(config.poolBytes()));
      if (i > 0) EXPECT_EQ(scales[i] - scales[i - 1], config.scaleElems());
      for (int64_t j = 0; j < config.scaleElems(); ++j) ASSERT_EQ(scales[i][j], 0.0f);
    }
  }
  KvPoolConfig bf16 = smallConfig(), int8 = smallConfig();
  bf16.element = KvElement::kBf16;
  int8.element = KvElement::kInt8;
  bf16.head_dim = int8.head_dim = 64;
  EXPECT_NEAR(double(bf16.blockBytes()) / double(int8.blockBytes()), 128.0 / 68.0, 1e-12);
  auto f32 = BlockPool::create(smallConfig());
  ASSERT_TRUE(f32.ok());
  EXPECT_EQ(f32->keyScales(0), nullptr);
  EXPECT_EQ(smallConfig().scaleBytes(), 0);
}

TEST(BlockPoolTest, ElementNamesRoundTrip) {
  for (KvElement e : {KvElement::kF32, KvElement::kF16, KvElement::kBf16, KvElement::kInt8, KvElement::kFp8E4M3})
    EXPECT_EQ(parseKvElement(kvElementName(e)), e);
  EXPECT_EQ(parseKvElement("i8"), std::nullopt);
  EXPECT_EQ(parseKvElement("q4_0"), std::nullopt);
}

// The CUDA executor's pool: block bookkeeping only, its K/V on the GPU. A
// Llama-3-8B-sized pool of 2^20 blocks would be 4 TiB of f32 here.
TEST(BlockPoolTest, ElsewhereKeepsOnlyTheBookkeeping) {
  const KvPoolConfig config{.layers = 32, .num_blocks = 1 << 20, .page_size = 16, .kv_heads = 8, .head_dim = 128};
  auto pool = BlockPool::create(config, KvStorage::kElsewhere);
  ASSERT_TRUE(pool.ok()) << pool.error().message;
  EXPECT_EQ(pool->keys(0), nullptr);
  EXPECT_EQ(pool->values(31), nullptr);
  EXPECT_EQ(pool->numFree(), 1 << 20);
  std::vector<int32_t> blocks;
  ASSERT_TRUE(pool->allocate(3, blocks).ok());
  EXPECT_EQ(blocks, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool->numFree(), (1 << 20) - 3);
  for (int32_t b : blocks) ASSERT_TRUE(pool->release(b).ok());
  EXPECT_EQ(pool->numFree(), 1 << 20);
}

TEST(BlockPoolTest, RejectsBadConfig) {
  KvPoolConfig config = smallConfig();
  config.page_size = 0;
  auto pool = BlockPool::create(config);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.error().message,
            "kv pool: layers (2), num_blocks (4), page_size (0), kv_heads (2) and head_dim (8) "
            "must all be positive (layers, kv_heads and head_dim may be 0 together)");
}

// A model without attention layers (state-space): the pool keeps the block
// bookkeeping alone, with no storage.
TEST(BlockPoolTest, NoLayersKeepsBookkeepingAlone) {
  auto pool = BlockPool::create({.layers = 0, .num_blocks = 4, .page_size = 16, .kv_heads = 0, .head_dim = 0});
  ASSERT_TRUE(pool.ok()) << pool.error().message;
  std::vector<int32_t> blocks;
  ASSERT_TRUE(pool->allocate(3, blocks).ok());
  EXPECT_EQ(pool->numFree(), 1);
  EXPECT_EQ(pool->config().blockBytes(), 0);
  for (int32_t b : blocks) ASSERT_TRUE(pool->release(b).ok());
  EXPECT_EQ(pool->numFree(), 4);
  KvPoolConfig headless{.layers = 1, .num_blocks = 4, .page_size = 16, .kv_heads = 0, .head_dim = 8};
  EXPECT_FALSE(BlockPool::create(headless).ok());
}

TEST(BlockPoolTest, RefCountsReturnBlocksAtZero) {
  auto pool = BlockPool::create(smallConfig());
  ASSERT_TRUE(pool.ok());
  std::vector<int32_t> blocks;
  ASSERT_TRUE(pool->allocate(2, blocks).ok());
  EXPECT_EQ(blocks, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(pool->numFree(), 2);
  ASSERT_TRUE(pool->retain(1).ok());
  EXPECT_EQ(pool->refCount(1), 2);
  ASSERT_TRUE(pool->release(1).ok());
  EXPECT_EQ(pool->numFree(), 2);
  ASSERT_TRUE(pool->release(1).ok());
  EXPECT_EQ(pool->numFree(), 3);
  EXPECT_EQ(pool->refCount(1), 0);
  auto again = pool->release(1);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().message, "kv pool: release of free block 1");
  EXPECT_EQ(pool->retain(9).error().message, "kv pool: block 9 is out of range [0, 4)");
}

TEST(BlockPoolTest, ExhaustionTakesNothing) {
  auto pool = BlockPool::create(smallConfig(3));
  ASSERT_TRUE(pool.ok());
  std::vector<int32_t> blocks;
  ASSERT_TRUE(pool->allocate(2, blocks).ok());
  auto status = pool->allocate(2, blocks);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().message, "kv pool exhausted: need 2 blocks, 1 of 3 free");
  EXPECT_EQ(blocks.size(), 2u);
  EXPECT_EQ(pool->numFree(), 1);
}

TEST(BlockTableTest, SlotsFollowTheTable) {
  auto pool = BlockPool::create(smallConfig(8));
  ASSERT_TRUE(pool.ok());
  BlockTable a(4), b(4);
  ASSERT_TRUE(a.append(*pool, 3).ok());  // a: block 0
  ASSERT_TRUE(b.append(*pool, 5).ok());  // b: blocks 1, 2
  ASSERT_TRUE(a.append(*pool, 2).ok());  // a: token 4 starts block 3
  EXPECT_EQ(std::vector<int32_t>(a.blocks().begin(), a.blocks().end()),
            (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(std::vector<int32_t>(b.blocks().begin(), b.blocks().end()),
            (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(*a.slot(2), 2);
  EXPECT_EQ(*a.slot(4), 3 * 4 + 0);
  EXPECT_EQ(*b.slot(4), 2 * 4 + 0);
  std::vector<int32_t> slots(3);
  ASSERT_TRUE(a.slots(2, slots).ok());
  EXPECT_EQ(slots, (std::vector<int32_t>{2, 3, 12}));
  EXPECT_EQ(a.slot(5).error().message,
            "block table: position 5 is outside the sequence's 5 tokens");
  a.release(*pool);
  EXPECT_EQ(a.numTokens(), 0);
  EXPECT_EQ(pool->numFree(), 6);
  // Appending within the last block allocates nothing.
  ASSERT_TRUE(b.append(*pool, 3).ok());
  EXPECT_EQ(b.blocks().size(), 2u);
  EXPECT_EQ(pool->numFree(), 6);
}

TEST(BlockTableTest, ExhaustionLeavesTheTableAsItWas) {
  auto pool = BlockPool::create(smallConfig(2));
  ASSERT_TRUE(pool.ok());
  BlockTable t(4);
  ASSERT_TRUE(t.append(*pool, 6).ok());
  auto status = t.append(*pool, 3);  // needs a third block
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().message, "kv pool exhausted: need 1 block, 0 of 2 free");
  EXPECT_EQ(t.numTokens(), 6);
  EXPECT_EQ(t.blocks().size(), 2u);
  ASSERT_TRUE(t.append(*pool, 2).ok());  // fills block 1 exactly
  EXPECT_EQ(t.numTokens(), 8);
}

// Rejected drafts roll back: the blocks wholly past the kept tokens return
// to the pool, the partial one stays.
TEST(BlockTableTest, TruncateReleasesTheBlocksPastTheKeptTokens) {
  auto pool = BlockPool::create(smallConfig(4));
  ASSERT_TRUE(pool.ok());
  BlockTable t(4);
  ASSERT_TRUE(t.append(*pool, 5).ok());
  ASSERT_TRUE(t.append(*pool, 6).ok());  // 11 tokens: 3 blocks
  EXPECT_EQ(pool->numFree(), 1);
  ASSERT_TRUE(t.truncate(*pool, 6).ok());
  EXPECT_EQ(t.numTokens(), 6);
  EXPECT_EQ(t.blocks().size(), 2u);
  EXPECT_EQ(pool->numFree(), 2);
  ASSERT_TRUE(t.truncate(*pool, 6).ok());  // nothing to do
  EXPECT_FALSE(t.truncate(*pool, 7).ok());  // cannot grow
  ASSERT_TRUE(t.truncate(*pool, 0).ok());
  EXPECT_EQ(pool->numFree(), 4);
}

// Forked tables share every block; the first append into the shared
// partial block copies it, the full ones stay shared.
TEST(BlockTableTest, ForkCopiesTheSharedPartialBlockOnWrite) {
  auto pool = BlockPool::create(smallConfig(8));
  ASSERT_TRUE(pool.ok());
  BlockTable parent(4);
  ASSERT_TRUE(parent.append(*pool, 6).ok());  // a full block and half of one
  BlockTable child = parent.fork(*pool);
  EXPECT_EQ(pool->refCount(parent.blocks()[1]), 2);
  EXPECT_EQ(child.blocksNeeded(*pool, 1), 1);  // the copy
  EXPECT_FALSE(child.append(*pool, 1).ok());  // no place to record the copy: refused
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(child.append(*pool, 1, &copies).ok());
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].from, parent.blocks()[1]);
  EXPECT_EQ(copies[0].to, child.blocks()[1]);
  EXPECT_EQ(child.blocks()[0], parent.blocks()[0]);
  EXPECT_EQ(pool->refCount(parent.blocks()[0]), 2);
  EXPECT_EQ(pool->refCount(parent.blocks()[1]), 1);
  // The parent is alone on its partial block now: no copy.
  copies.clear();
  ASSERT_TRUE(parent.append(*pool, 1, &copies).ok());
  EXPECT_TRUE(copies.empty());
  parent.release(*pool);
  child.release(*pool);
  EXPECT_EQ(pool->numFree(), 8);
}

TEST(BlockPoolTest, CopyBlocksCopiesEveryLayersValuesAndScales) {
  KvPoolConfig config = smallConfig(4);
  config.element = KvElement::kInt8;
  auto pool = BlockPool::create(config);
  ASSERT_TRUE(pool.ok());
  const int64_t block_bytes = config.poolBytes() / config.num_blocks;
  const int64_t block_scales = config.scaleElems() / config.num_blocks;
  for (int layer = 0; layer < config.layers; ++layer) {
    auto* k = static_cast<uint8_t*>(pool->keys(layer));
    auto* v = static_cast<uint8_t*>(pool->values(layer));
    for (int64_t i = 0; i < block_bytes; ++i) {
      k[block_bytes + i] = uint8_t(1 + i + layer);
      v[block_bytes + i] = uint8_t(7 + i + layer);
    }
    for (int64_t i = 0; i < block_scales; ++i) pool->valueScales(layer)[block_scales + i] = 0.5f + float(i + layer);
  }
  const BlockCopy copy{1, 3};
  ASSERT_TRUE(pool->copyBlocks({&copy, 1}).ok());
  for (int layer = 0; layer < config.layers; ++layer) {
    auto* k = static_cast<uint8_t*>(pool->keys(layer));
    auto* v = static_cast<uint8_t*>(pool->values(layer));
    for (int64_t i = 0; i < block_bytes; ++i) {
      ASSERT_EQ(k[3 * block_bytes + i], uint8_t(1 + i + layer));
      ASSERT_EQ(v[3 * block_bytes + i], uint8_t(7 + i + layer));
    }
    for (int64_t i = 0; i < block_scales; ++i)
      ASSERT_EQ(pool->valueScales(layer)[3 * block_scales + i], 0.5f + float(i + layer));
  }
  const BlockCopy bad{1, 4};
  EXPECT_EQ(pool->copyBlocks({&bad, 1}).error().message, "kv pool: copy of block 1 to 4 is out of range [0, 4)");
}

TEST(BlockPoolTest, CachedOnlyBlocksAreCountedExactly) {
  auto pool = BlockPool::create(smallConfig(4), KvStorage::kElsewhere);
  ASSERT_TRUE(pool.ok());
  std::vector<int32_t> blocks;
  ASSERT_TRUE(pool->allocate(2, blocks).ok());
  ASSERT_TRUE(pool->retain(blocks[0]).ok());  // the cache's reference
  ASSERT_TRUE(pool->setCached(blocks[0], true).ok());
  EXPECT_EQ(pool->numCachedOnly(), 0);  // the sequence still holds it
  ASSERT_TRUE(pool->release(blocks[0]).ok());
  EXPECT_EQ(pool->numCachedOnly(), 1);
  EXPECT_EQ(pool->numUsed(), 1);
  ASSERT_TRUE(pool->retain(blocks[0]).ok());  // a hit
  EXPECT_EQ(pool->numCachedOnly(), 0);
  ASSERT_TRUE(pool->release(blocks[0]).ok());
  ASSERT_TRUE(pool->release(blocks[0]).ok());  // evicted
  EXPECT_EQ(pool->numCachedOnly(), 0);
  EXPECT_FALSE(pool->isCached(blocks[0]));
  EXPECT_EQ(pool->numFree(), 3);
  EXPECT_FALSE(pool->setCached(blocks[0], true).ok());  // free blocks cannot be cached
}

// Blocks before a sliding window are released while the table keeps their
// ids; a fork and the final release skip them.
TEST(BlockTableTest, DroppedPrefixBlocksGoBackToThePool) {
  auto pool = BlockPool::create(smallConfig(8), KvStorage::kElsewhere);
  ASSERT_TRUE(pool.ok());
  BlockTable t(4);
  ASSERT_TRUE(t.append(*pool, 14).ok());  // 3 full blocks and half of one
  EXPECT_FALSE(t.dropPrefix(*pool, 4).ok());  // the partial block is still written
  ASSERT_TRUE(t.dropPrefix(*pool, 2).ok());
  EXPECT_EQ(t.droppedBlocks(), 2);
  EXPECT_EQ(t.blocks().size(), 4u);
  EXPECT_EQ(pool->numFree(), 6);
  EXPECT_FALSE(t.replaceBlock(*pool, 1, 0).ok());  // a dropped block is nobody's to replace
  BlockTable fork = t.fork(*pool);
  EXPECT_EQ(fork.droppedBlocks(), 2);
  EXPECT_EQ(pool->refCount(t.blocks()[2]), 2);
  fork.release(*pool);
  t.release(*pool);
  EXPECT_EQ(pool->numFree(), 8);
  EXPECT_EQ(t.droppedBlocks(), 0);
}

TEST(BlockTableTest, PageSizeMismatchIsAnError) {
  auto pool = BlockPool::create(smallConfig());
  ASSERT_TRUE(pool.ok());
  BlockTable t(16);
  EXPECT_EQ(t.append(*pool, 1).error().message,
            "block table: page size 16 does not match the pool's 4");
}

}  // namespace
}  // namespace kiln
