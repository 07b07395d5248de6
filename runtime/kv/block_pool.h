// Memory of the paged KV cache. A BlockPool owns, for every layer, a K pool
// and a V pool of shape [num_blocks, page_size, kv_heads, head_dim] of its
// element type (f32; f16/bf16: half the memory, llama.cpp's default; int8 or
// fp8 e4m3: a quarter, plus an f32 scale per (slot, kv head) in a
// [num_blocks, kv_heads, page_size] array beside each pool), and
// hands out block ids from a free list with reference counts (a block shared
// by two sequences, e.g. a common prefix, is freed when both release it).
// A BlockTable maps one sequence's token positions to slots in the pools:
//   slot(p) = table[p / page_size] * page_size + p % page_size
// Running out of blocks is an error that changes nothing: allocations are
// all-or-nothing, so a failed append never leaves a half-grown table.
//
// Sharing: a full block may be held by several tables and by the prefix
// cache (which marks it cached); a partly filled block shared by forked
// tables (parallel sampling) is copied on write, when a table appends into
// it, so no table ever writes a slot another one reads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/support/error.h"

namespace kiln {

// A pool's element type. Keys and values are computed in f32; f16 and bf16
// pools round them (to nearest even) when appended, int8 and fp8 e4m3 pools
// quantize each (token, kv head) row with its own scale (kv_quant.h).
enum class KvElement { kF32, kF16, kBf16, kInt8, kFp8E4M3 };
int kvElementBytes(KvElement element);
// int8 and fp8 e4m3 rows carry a scale.
inline bool kvElementHasScales(KvElement e) { return e == KvElement::kInt8 || e == KvElement::kFp8E4M3; }
// The manifest's kv_cache.type spelling: "f32", "f16", "bf16", "int8", "fp8e4m3".
std::string_view kvElementName(KvElement element);
std::optional<KvElement> parseKvElement(std::string_view name);
// One f32 scale per (token slot, kv head): f32 rather than f16 keeps any
// head's absmax / qmax exact and in range, and costs 4 bytes against the
// head_dim bytes of the row (6% at head_dim 64).
inline constexpr int kKvScaleBytes = 4;

struct KvPoolConfig {
  int layers = 0;
  int64_t num_blocks = 0;
  int page_size = 0;
  int kv_heads = 0;
  int head_dim = 0;
  KvElement element = KvElement::kF32;

  // Elements of one layer's K (or V) pool.
  int64_t poolElems() const { return num_blocks * page_size * int64_t(kv_heads) * head_dim; }
  int64_t poolBytes() const { return poolElems() * kvElementBytes(element); }
  // Scales of one layer's K (or V) pool: one per (slot, kv head) for int8
  // and fp8, none for the float elements.
  int64_t scaleElems() const {
    return kvElementHasScales(element) ? num_blocks * page_size * int64_t(kv_heads) : 0;
  }
  int64_t scaleBytes() const { return scaleElems() * kKvScaleBytes; }
  // What one block costs in all layers' K and V pools, scales included: the
  // unit a memory budget is divided by.
  int64_t blockBytes() const {
    const int64_t row = int64_t(head_dim) * kvElementBytes(element) + (kvElementHasScales(element) ? kKvScaleBytes : 0);
    return 2 * int64_t(layers) * page_size * kv_heads * row;
  }
};

// Where a pool's K/V live: in the pool itself (the CPU executor), or
// elsewhere (the CUDA executor keeps them on the GPU and only the block
// bookkeeping here).
enum class KvStorage { kHost, kElsewhere };

// Copy every layer's K and V (and scales) of block `from` into block `to`.
struct BlockCopy {
  int32_t from = 0;
  int32_t to = 0;
};

// One token slot's keys and values (and scales) moved to another slot in
// every layer: speculative decoding's accepted tree nodes moved to the
// positions of their depths.
struct SlotCopy {
  int64_t from = 0;
  int64_t to = 0;
};

class BlockPool {
 public:
  // With KvStorage::kHost, allocates 2 * layers pools and their scales at
  // once (zeroed); fails on non-positive sizes or a size that overflows.
  static Result<BlockPool> create(const KvPoolConfig& config, KvStorage storage = KvStorage::kHost);

  BlockPool(BlockPool&&) noexcept = default;
  BlockPool& operator=(BlockPool&&) noexcept = default;

  const KvPoolConfig& config() const { return config_; }
  // [num_blocks, page_size, kv_heads, head_dim] of config().element for
  // `layer`; null when the pool was created with KvStorage::kElsewhere.
  void* keys(int layer) { return storage_ ? storage_.get() + (2 * int64_t(layer)) * config_.poolBytes() : nullptr; }
  void* values(int layer) {
    return storage_ ? storage_.get() + (2 * int64_t(layer) + 1) * config_.poolBytes() : nullptr;
  }
  // [num_blocks, kv_heads, page_size] f32 scales of `layer`'s K (or V) pool
  // (kvScaleIndex);
  // null for the float elements and with KvStorage::kElsewhere.
  float* keyScales(int layer) { return scales(2 * int64_t(layer)); }
  float* valueScales(int layer) { return scales(2 * int64_t(layer) + 1); }

  int64_t numBlocks() const { return config_.num_blocks; }
  int64_t numFree() const { return int64_t(free_.size()); }
  // Blocks held by the prefix cache alone (marked cached, reference count
  // 1): free for the taking once the cache evicts them.
  int64_t numCachedOnly() const { return cached_only_; }
  // Blocks some sequence holds: numBlocks() - numFree() - numCachedOnly().
  int64_t numUsed() const { return numBlocks() - numFree() - cached_only_; }

  // `count` fresh blocks with reference count 1, appended to `out`; if fewer
  // than `count` are free, nothing is taken and the error says how many.
  Status allocate(int64_t count, std::vector<int32_t>& out);
  // One more holder of an allocated block.
  Status retain(int32_t block);
  // One holder fewer; the block returns to the free list at zero.
  Status release(int32_t block);
  // 0 for a free block (or an id out of range).
  int refCount(int32_t block) const;
  // Marks an allocated block as one the prefix cache holds a reference to
  // (or no longer does), for numCachedOnly()'s accounting.
  Status setCached(int32_t block, bool cached);
  bool isCached(int32_t block) const { return block >= 0 && block < numBlocks() && cached_[size_t(block)]; }
  // Copies blocks in the host pools (KvStorage::kHost); an executor that
  // keeps the pools elsewhere copies them itself.
  Status copyBlocks(std::span<const BlockCopy> copies);
  // Copies slots, in order, in the host pools; an error when the pools are
  // elsewhere.
  Status copySlots(std::span<const SlotCopy> copies);

 private:
  BlockPool() = default;
  // The scales follow all the values, at a 64-byte boundary.
  int64_t scalesOffset() const { return (2 * int64_t(config_.layers) * config_.poolBytes() + 63) / 64 * 64; }
  float* scales(int64_t pool) {
    if (!storage_ || config_.scaleElems() == 0) return nullptr;
    return reinterpret_cast<float*>(storage_.get() + scalesOffset()) + pool * config_.scaleElems();
  }

  KvPoolConfig config_;
  std::unique_ptr<uint8_t[]> storage_;
  // Free block ids, popped from the back; the lowest ids go out first.
  std::vector<int32_t> free_;
  std::vector<int32_t> refs_;  // [num_blocks]
  std::vector<uint8_t> cached_;  // [num_blocks]
  int64_t cached_only_ = 0;     // cached blocks with reference count 1
};

class BlockTable {
 public:
  explicit BlockTable(int page_size) : page_size_(page_size) {}

  int64_t numTokens() const { return num_tokens_; }
  // Block ids in position order; a row of the forward's block_tables input.
  std::span<const int32_t> blocks() const { return blocks_; }

  // Grows the sequence by `count` tokens, allocating the blocks that the new
  // positions need. All or nothing: on error (pool exhausted) the table is as
  // before. When the new positions start inside a partly filled block that
  // other holders share, that block is first replaced by a fresh copy: the
  // copy is appended to `copies` (which must then be done before anything
  // writes the new slots); without `copies` a shared partial block is an
  // error.
  Status append(BlockPool& pool, int64_t count, std::vector<BlockCopy>* copies = nullptr);
  // Blocks that append(pool, count) would take from the pool.
  int64_t blocksNeeded(const BlockPool& pool, int64_t count) const;
  // A table over the same blocks (each retained once more), as a forked
  // sequence starts.
  BlockTable fork(BlockPool& pool) const;
  // Starts an empty table with `blocks`, full and already retained by the
  // caller (a prefix-cache hit).
  Status adoptPrefix(std::span<const int32_t> blocks);
  // Replaces full block `index` by `block`, which holds the same keys and
  // values and is retained by the caller; the old one is released.
  Status replaceBlock(BlockPool& pool, int64_t index, int32_t block);
  // Pool slot of token `position` (< numTokens()).
  Result<int64_t> slot(int64_t position) const;
  // slot(begin + i) for i < out.size(), as the i32 slot_mapping input.
  Status slots(int64_t begin, std::span<int32_t> out) const;
  // Releases every block and empties the table.
  void release(BlockPool& pool);
  // Shrinks the table to its first `num_tokens` tokens, releasing the blocks
  // wholly past them: speculative decoding's rollback of rejected drafts
  // (the slots kept past num_tokens are written again before any read).
  Status truncate(BlockPool& pool, int64_t num_tokens);
  // Releases the first `count` blocks (those before a sliding window, never
  // read again); their ids stay in blocks() so positions keep their slots,
  // but the pool may hand them out again. At most numTokens() / page_size.
  Status dropPrefix(BlockPool& pool, int64_t count);
  // Blocks released by dropPrefix.
  int64_t droppedBlocks() const { return dropped_; }

 private:
  int page_size_;
  int64_t num_tokens_ = 0;
  std::vector<int32_t> blocks_;
  int64_t dropped_ = 0;  // blocks_[0, dropped_) are released (dropPrefix)
};

}  // namespace kiln
