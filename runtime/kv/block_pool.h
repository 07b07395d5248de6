// Memory of the paged KV cache. A BlockPool owns, for every layer, a K pool
// and a V pool of shape [num_blocks, page_size, kv_heads, head_dim] of its
// element type (f32, or f16/bf16: half the memory, llama.cpp's default), and
// hands out block ids from a free list with reference counts (a block shared
// by two sequences, e.g. a common prefix, is freed when both release it).
// A BlockTable maps one sequence's token positions to slots in the pools:
//   slot(p) = table[p / page_size] * page_size + p % page_size
// Running out of blocks is an error that changes nothing: allocations are
// all-or-nothing, so a failed append never leaves a half-grown table.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/support/error.h"

namespace kiln {

// A pool's element type; keys and values are computed in f32 and rounded
// to it (to nearest even) when appended.
enum class KvElement { kF32, kF16, kBf16 };
inline int kvElementBytes(KvElement e) { return e == KvElement::kF32 ? 4 : 2; }

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
};

// Where a pool's K/V live: in the pool itself (the CPU executor), or
// elsewhere (the CUDA executor keeps them on the GPU and only the block
// bookkeeping here).
enum class KvStorage { kHost, kElsewhere };

class BlockPool {
 public:
  // With KvStorage::kHost, allocates 2 * layers pools at once (zeroed);
  // fails on non-positive sizes or a size that overflows.
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

  int64_t numBlocks() const { return config_.num_blocks; }
  int64_t numFree() const { return int64_t(free_.size()); }

  // `count` fresh blocks with reference count 1, appended to `out`; if fewer
  // than `count` are free, nothing is taken and the error says how many.
  Status allocate(int64_t count, std::vector<int32_t>& out);
  // One more holder of an allocated block.
  Status retain(int32_t block);
  // One holder fewer; the block returns to the free list at zero.
  Status release(int32_t block);
  // 0 for a free block (or an id out of range).
  int refCount(int32_t block) const;

 private:
  BlockPool() = default;

  KvPoolConfig config_;
  std::unique_ptr<uint8_t[]> storage_;
  // Free block ids, popped from the back; the lowest ids go out first.
  std::vector<int32_t> free_;
  std::vector<int32_t> refs_;  // [num_blocks]
};

class BlockTable {
 public:
  explicit BlockTable(int page_size) : page_size_(page_size) {}

  int64_t numTokens() const { return num_tokens_; }
  // Block ids in position order; a row of the forward's block_tables input.
  std::span<const int32_t> blocks() const { return blocks_; }

  // Grows the sequence by `count` tokens, allocating the blocks that the new
  // positions need. All or nothing: on error (pool exhausted) the table is as
  // before.
  Status append(BlockPool& pool, int64_t count);
  // Pool slot of token `position` (< numTokens()).
  Result<int64_t> slot(int64_t position) const;
  // slot(begin + i) for i < out.size(), as the i32 slot_mapping input.
  Status slots(int64_t begin, std::span<int32_t> out) const;
  // Releases every block and empties the table.
  void release(BlockPool& pool);

 private:
  int page_size_;
  int64_t num_tokens_ = 0;
  std::vector<int32_t> blocks_;
};

}  // namespace kiln
