// The prefix cache: the KV blocks of token prefixes already computed, kept
// after their sequences end so that a later prompt starting with the same
// tokens skips their prefill (RadixAttention's idea, at block granularity).
//
// A radix tree whose edges are full blocks: a node stands for the prefix of
// page_size * depth tokens ending in its block's token run, and holds one
// reference to that block (BlockPool marks it cached). Only full blocks are
// cached, and a node's keys and values depend on every token before it,
// which is what the path from the root spells. Sequences take references to
// the blocks they match; a block only the cache holds is evictable, leaves
// first, least recently used first.
//
// Invariant: whoever holds a node's block holds its ancestors' blocks too
// (a sequence's table is a prefix path), so a cached-only node has no held
// descendant, and evicting leaves in LRU order can free every cached-only
// block.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "runtime/kv/block_pool.h"
#include "runtime/support/error.h"

namespace kiln {

class PrefixCache {
 public:
  struct Node;

  explicit PrefixCache(int page_size);
  ~PrefixCache();
  PrefixCache(PrefixCache&&) noexcept;
  PrefixCache& operator=(PrefixCache&&) noexcept;

  // The blocks of the longest cached prefix of `tokens`, at most
  // `max_blocks` of them, each retained once for the caller; the path is
  // marked used now.
  std::vector<int32_t> match(BlockPool& pool, std::span<const int32_t> tokens, int64_t max_blocks);
  // Counts one lookup that was used: `queried` prompt tokens, `hit` of them
  // found.
  void recordLookup(int64_t queried, int64_t hit) {
    queried_tokens_ += queried;
    hit_tokens_ += hit;
  }

  // Caches the full blocks [from_block, to_block) of `table`, a sequence
  // whose first to_block * page_size tokens are `tokens` with their keys and
  // values computed, continuing below `parent` (the node of block
  // from_block - 1; null for the root). Where a token run is cached already
  // under another block, the sequence's table takes the cached block instead
  // (the same keys and values) and its own is released, so equal prefixes
  // share memory. Returns the node of the last block, for the next call.
  Result<Node*> insert(BlockPool& pool, Node* parent, int64_t from_block, int64_t to_block,
                       std::span<const int32_t> tokens, BlockTable& table);

  // Frees up to `count` blocks held only by the cache, least recently used
  // leaves first; returns how many it freed. The leaves are kept in LRU
  // order as they change, so this costs O(log n) a block (a full pool evicts
  // on most steps), plus one skip for each leaf a sequence still holds.
  int64_t evict(BlockPool& pool, int64_t count);
  // Releases every block the cache holds (those sequences still hold stay
  // allocated).
  void clear(BlockPool& pool);

  int64_t cachedBlocks() const { return nodes_; }
  int64_t queriedTokens() const { return queried_tokens_; }
  int64_t hitTokens() const { return hit_tokens_; }

 private:
  // Marks `node` used at `now`, keeping its place among the leaves.
  void touch(Node* node, uint64_t now);

  int page_size_;
  std::unique_ptr<Node> root_;
  // Every leaf (held or not), least recently used first.
  std::set<std::pair<uint64_t, Node*>> leaves_;
  int64_t nodes_ = 0;
  uint64_t clock_ = 0;  // logical time of the last use, for LRU
  int64_t queried_tokens_ = 0, hit_tokens_ = 0;
};

}  // namespace kiln
