#include "runtime/kv/block_pool.h"

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
  if (config.layers <= 0 || config.num_blocks <= 0 || config.page_size <= 0 ||
      config.kv_heads <= 0 || config.head_dim <= 0)
    return makeError("kv pool: layers ({}), num_blocks ({}), page_size ({}), kv_heads ({}) and "
                     "head_dim ({}) must all be positive",
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
  ++refs_[size_t(block)];
  return {};
}

Status BlockPool::release(int32_t block) {
  if (block < 0 || block >= numBlocks())
    return makeError("kv pool: block {} is out of range [0, {})", block, numBlocks());
  if (refs_[size_t(block)] == 0) return makeError("kv pool: release of free block {}", block);
  if (--refs_[size_t(block)] == 0) free_.push_back(block);
  return {};
}

int BlockPool::refCount(int32_t block) const {
  if (block < 0 || block >= numBlocks()) return 0;
  return refs_[size_t(block)];
}

Status BlockTable::append(BlockPool& pool, int64_t count) {
  if (count < 0) return makeError("block table: cannot append {} tokens", count);
  if (pool.config().page_size != page_size_)
    return makeError("block table: page size {} does not match the pool's {}", page_size_,
                     pool.config().page_size);
  int64_t needed = (num_tokens_ + count + page_size_ - 1) / page_size_ - int64_t(blocks_.size());
  if (needed > 0) KILN_RETURN_IF_ERROR(pool.allocate(needed, blocks_));
  num_tokens_ += count;
  return {};
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
  // Blocks came from this pool, so release cannot fail here.
  for (int32_t block : blocks_) (void)pool.release(block);
  blocks_.clear();
  num_tokens_ = 0;
}

}  // namespace kiln
