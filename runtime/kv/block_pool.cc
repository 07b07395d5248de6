#include "runtime/kv/block_pool.h"

#include "runtime/kv/kv_quant.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>

namespace kiln {

int kvElementBytes(KvElement element) {
  switch (element) {
    case KvElement::kF32: return 4;
    case KvElement::kF16:
    case KvElement::kBf16: return 2;
    case KvElement::kInt8:
    case KvElement::kFp8E4M3: return 1;
  }
  return 0;
}

std::string_view kvElementName(KvElement element) {
  switch (element) {
    case KvElement::kF32: return "f32";
    case KvElement::kF16: return "f16";
    case KvElement::kBf16: return "bf16";
    case KvElement::kInt8: return "int8";
    case KvElement::kFp8E4M3: return "fp8e4m3";
  }
  return "";
}

std::optional<KvElement> parseKvElement(std::string_view name) {
  for (KvElement e : {KvElement::kF32, KvElement::kF16, KvElement::kBf16, KvElement::kInt8, KvElement::kFp8E4M3})
    if (kvElementName(e) == name) return e;
  return std::nullopt;
}

Result<BlockPool> BlockPool::create(const KvPoolConfig& config, KvStorage storage) {
  // layers 0: a model without attention layers (state-space), whose pool
  // keeps the block bookkeeping alone.
  if (config.layers < 0 || config.num_blocks <= 0 || config.page_size <= 0 ||
      (config.layers > 0 && (config.kv_heads <= 0 || config.head_dim <= 0)))
    return makeError("kv pool: layers ({}), num_blocks ({}), page_size ({}), kv_heads ({}) and "
                     "head_dim ({}) must all be positive (layers, kv_heads and head_dim may be 0 together)",
                     config.layers, config.num_blocks, config.page_size, config.kv_heads,
                     config.head_dim);
  if (config.num_blocks > std::numeric_limits<int32_t>::max())
    return makeError("kv pool: num_blocks {} does not fit the i32 block ids", config.num_blocks);
  // 2 * layers pools of num_blocks * page * heads * (dim values + a scale)
  // must fit in memory sizes.
  const __int128 bytes = __int128(config.num_blocks) * 2 * config.layers * config.page_size * config.kv_heads *
                             (int64_t(config.head_dim) * kvElementBytes(config.element) + kKvScaleBytes) +
                         64;
  if (bytes > __int128(std::numeric_limits<int64_t>::max()) ||
      __int128(config.num_blocks) * config.page_size > std::numeric_limits<int32_t>::max())
    return makeError("kv pool: {} blocks of {} tokens overflow the slot range", config.num_blocks,
                     config.page_size);
  BlockPool pool;
  pool.config_ = config;
  const int64_t total = config.scaleElems() > 0 ? pool.scalesOffset() + 2 * int64_t(config.layers) * config.scaleBytes()
                                                : 2 * int64_t(config.layers) * config.poolBytes();
  if (storage == KvStorage::kHost) pool.storage_.reset(new (std::nothrow) uint8_t[size_t(total)]());
  if (storage == KvStorage::kHost && !pool.storage_)
    return makeError("kv pool: cannot allocate {} bytes for {} layers x {} blocks", total, config.layers,
                     config.num_blocks);
  pool.refs_.assign(size_t(config.num_blocks), 0);
  pool.cached_.assign(size_t(config.num_blocks), 0);
  pool.free_.reserve(size_t(config.num_blocks));
  for (int64_t b = config.num_blocks - 1; b >= 0; --b) pool.free_.push_back(int32_t(b));
  return pool;
}

Status BlockPool::allocate(int64_t count, std::vector<int32_t>& out) {
  if (count < 0) return makeError("kv pool: cannot allocate {} blocks", count);
  if (count > numFree())
    return makeError("kv pool exhausted: need {} block{}, {} of {} free", count,
                     count == 1 ? "" : "s", numFree(), numBlocks());
  for (int64_t i = 0; i < count; ++i) {
    int32_t block = free_.back();
    free_.pop_back();
    refs_[size_t(block)] = 1;
    out.push_back(block);
  }
  return {};
}

Status BlockPool::retain(int32_t block) {
  if (block < 0 || block >= numBlocks())
    return makeError("kv pool: block {} is out of range [0, {})", block, numBlocks());
  if (refs_[size_t(block)] == 0) return makeError("kv pool: retain of free block {}", block);
  if (cached_[size_t(block)] && refs_[size_t(block)] == 1) --cached_only_;
  ++refs_[size_t(block)];
  return {};
}

Status BlockPool::release(int32_t block) {
  if (block < 0 || block >= numBlocks())
    return makeError("kv pool: block {} is out of range [0, {})", block, numBlocks());
  if (refs_[size_t(block)] == 0) return makeError("kv pool: release of free block {}", block);
  const int32_t left = --refs_[size_t(block)];
  if (cached_[size_t(block)] && left == 1) ++cached_only_;
  if (left == 0) {
    // The cache's own reference was the last: the block leaves the cache.
    if (cached_[size_t(block)]) --cached_only_;
    cached_[size_t(block)] = 0;
    free_.push_back(block);
  }
  return {};
}

Status BlockPool::setCached(int32_t block, bool cached) {
  if (block < 0 || block >= numBlocks())
    return makeError("kv pool: block {} is out of range [0, {})", block, numBlocks());
  if (refs_[size_t(block)] == 0) return makeError("kv pool: cache mark on free block {}", block);
  if (bool(cached_[size_t(block)]) == cached) return {};
  cached_[size_t(block)] = cached;
  if (refs_[size_t(block)] == 1) cached_only_ += cached ? 1 : -1;
  return {};
}

Status BlockPool::copyBlocks(std::span<const BlockCopy> copies) {
  for (const BlockCopy& c : copies) {
    if (c.from < 0 || c.from >= numBlocks() || c.to < 0 || c.to >= numBlocks())
      return makeError("kv pool: copy of block {} to {} is out of range [0, {})", c.from, c.to, numBlocks());
    if (!storage_) continue;  // the executor keeps the values
    const int64_t block_bytes = config_.poolBytes() / config_.num_blocks;
    for (int64_t pool = 0; pool < 2 * int64_t(config_.layers); ++pool) {
      uint8_t* base = storage_.get() + pool * config_.poolBytes();
      std::memcpy(base + c.to * block_bytes, base + c.from * block_bytes, size_t(block_bytes));
      if (float* s = scales(pool)) {
        const int64_t per_block = config_.scaleElems() / config_.num_blocks;
        std::memcpy(s + c.to * per_block, s + c.from * per_block, size_t(per_block) * sizeof(float));
      }
    }
  }
  return {};
}

Status BlockPool::copySlots(std::span<const SlotCopy> copies) {
  const int64_t slots = int64_t(numBlocks()) * config_.page_size;
  if (!copies.empty() && !storage_) return makeError("kv pool: slot copies need the pools in host memory");
  const int64_t slot_bytes = config_.poolBytes() / slots;
  for (const SlotCopy& c : copies) {
    if (c.from < 0 || c.from >= slots || c.to < 0 || c.to >= slots)
      return makeError("kv pool: copy of slot {} to {} is out of range [0, {})", c.from, c.to, slots);
    for (int64_t pool = 0; pool < 2 * int64_t(config_.layers); ++pool) {
      uint8_t* base = storage_.get() + pool * config_.poolBytes();
      std::memcpy(base + c.to * slot_bytes, base + c.from * slot_bytes, size_t(slot_bytes));
      if (float* s = scales(pool))
        for (int head = 0; head < config_.kv_heads; ++head)
          s[kvScaleIndex(c.to, head, config_.page_size, config_.kv_heads)] =
              s[kvScaleIndex(c.from, head, config_.page_size, config_.kv_heads)];
    }
  }
  return {};
}

int BlockPool::refCount(int32_t block) const {
  if (block < 0 || block >= numBlocks()) return 0;
  return refs_[size_t(block)];
}

// Whether appending writes into the last block while another holder
// shares it.
static bool writesSharedBlock(const BlockPool& pool, std::span<const int32_t> blocks, int64_t num_tokens,
                              int page_size, int64_t count) {
  return count > 0 && num_tokens % page_size != 0 && pool.refCount(blocks.back()) > 1;
}

int64_t BlockTable::blocksNeeded(const BlockPool& pool, int64_t count) const {
  const int64_t grow = std::max<int64_t>(0, (num_tokens_ + count + page_size_ - 1) / page_size_ - int64_t(blocks_.size()));
  return grow + (writesSharedBlock(pool, blocks_, num_tokens_, page_size_, count) ? 1 : 0);
}

Status BlockTable::append(BlockPool& pool, int64_t count, std::vector<BlockCopy>* copies) {
  if (count < 0) return makeError("block table: cannot append {} tokens", count);
  if (pool.config().page_size != page_size_)
    return makeError("block table: page size {} does not match the pool's {}", page_size_,
                     pool.config().page_size);
  const bool copy_last = writesSharedBlock(pool, blocks_, num_tokens_, page_size_, count);
  if (copy_last && !copies)
    return makeError("block table: appending into shared block {} needs a copy on write", blocks_.back());
  const int64_t grow = (num_tokens_ + count + page_size_ - 1) / page_size_ - int64_t(blocks_.size());
  std::vector<int32_t> fresh;
  KILN_RETURN_IF_ERROR(pool.allocate(std::max<int64_t>(grow, 0) + (copy_last ? 1 : 0), fresh));
  size_t next = 0;
  if (copy_last) {
    const int32_t shared = blocks_.back();
    copies->push_back({shared, fresh[next]});
    blocks_.back() = fresh[next++];
    (void)pool.release(shared);  // others still hold it
  }
  blocks_.insert(blocks_.end(), fresh.begin() + int64_t(next), fresh.end());
  num_tokens_ += count;
  return {};
}

Status BlockTable::truncate(BlockPool& pool, int64_t num_tokens) {
  if (num_tokens < 0 || num_tokens > num_tokens_ || num_tokens < dropped_ * page_size_)
    return makeError("block table: cannot truncate {} tokens to {} (blocks dropped before {})", num_tokens_,
                     num_tokens, dropped_ * page_size_);
  const size_t keep = size_t((num_tokens + page_size_ - 1) / page_size_);
  for (size_t b = keep; b < blocks_.size(); ++b) (void)pool.release(blocks_[b]);
  blocks_.resize(keep);
  num_tokens_ = num_tokens;
  return {};
}

BlockTable BlockTable::fork(BlockPool& pool) const {
  BlockTable copy(page_size_);
  copy.blocks_ = blocks_;
  copy.num_tokens_ = num_tokens_;
  copy.dropped_ = dropped_;
  for (size_t b = size_t(dropped_); b < blocks_.size(); ++b) (void)pool.retain(blocks_[b]);  // held, so allocated
  return copy;
}

Status BlockTable::dropPrefix(BlockPool& pool, int64_t count) {
  if (count > num_tokens_ / page_size_)
    return makeError("block table: cannot drop {} blocks of a sequence with {} full", count, num_tokens_ / page_size_);
  for (; dropped_ < count; ++dropped_) KILN_RETURN_IF_ERROR(pool.release(blocks_[size_t(dropped_)]));
  return {};
}

Status BlockTable::adoptPrefix(std::span<const int32_t> blocks) {
  if (num_tokens_ != 0) return makeError("block table: a prefix is adopted only by an empty table");
  blocks_.assign(blocks.begin(), blocks.end());
  num_tokens_ = int64_t(blocks.size()) * page_size_;
  return {};
}

Status BlockTable::replaceBlock(BlockPool& pool, int64_t index, int32_t block) {
  if (index < dropped_ || index >= num_tokens_ / page_size_)
    return makeError("block table: block {} is not one of the {} full blocks", index, num_tokens_ / page_size_);
  const int32_t old = blocks_[size_t(index)];
  blocks_[size_t(index)] = block;
  return pool.release(old);
}

Result<int64_t> BlockTable::slot(int64_t position) const {
  if (position < 0 || position >= num_tokens_)
    return makeError("block table: position {} is outside the sequence's {} tokens", position,
                     num_tokens_);
  return int64_t(blocks_[size_t(position / page_size_)]) * page_size_ + position % page_size_;
}

Status BlockTable::slots(int64_t begin, std::span<int32_t> out) const {
  if (begin < 0 || begin + int64_t(out.size()) > num_tokens_)
    return makeError("block table: positions [{}, {}) are outside the sequence's {} tokens", begin,
                     begin + int64_t(out.size()), num_tokens_);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t p = begin + int64_t(i);
    out[i] = int32_t(int64_t(blocks_[size_t(p / page_size_)]) * page_size_ + p % page_size_);
  }
  return {};
}

void BlockTable::release(BlockPool& pool) {
  // Blocks came from this pool, so release cannot fail here. Last block
  // first: the free list hands them out again first in, last out, so the
  // next table gets them in ascending order, as a fresh pool gives them.
  for (auto block = blocks_.rbegin(); block != blocks_.rend() - dropped_; ++block) (void)pool.release(*block);
  dropped_ = 0;
  blocks_.clear();
  num_tokens_ = 0;
}

}  // namespace kiln
