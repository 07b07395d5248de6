#include "runtime/kv/prefix_cache.h"

#include <algorithm>

namespace kiln {

struct PrefixCache::Node {
  Node* parent = nullptr;
  std::vector<int32_t> run;  // this block's page_size tokens (empty at the root)
  int32_t block = -1;
  uint64_t last_used = 0;
  std::map<std::vector<int32_t>, std::unique_ptr<Node>> children;
};

PrefixCache::PrefixCache(int page_size) : page_size_(page_size), root_(std::make_unique<Node>()) {}
PrefixCache::~PrefixCache() = default;
PrefixCache::PrefixCache(PrefixCache&&) noexcept = default;
PrefixCache& PrefixCache::operator=(PrefixCache&&) noexcept = default;

void PrefixCache::touch(Node* node, uint64_t now) {
  if (node->children.empty()) {
    leaves_.erase({node->last_used, node});
    leaves_.insert({now, node});
  }
  node->last_used = now;
}

std::vector<int32_t> PrefixCache::match(BlockPool& pool, std::span<const int32_t> tokens, int64_t max_blocks) {
  std::vector<int32_t> blocks;
  const uint64_t now = ++clock_;
  Node* node = root_.get();
  std::vector<int32_t> run(static_cast<size_t>(page_size_));
  for (int64_t b = 0; b < max_blocks && (b + 1) * page_size_ <= int64_t(tokens.size()); ++b) {
    std::copy_n(tokens.begin() + b * page_size_, page_size_, run.begin());
    auto it = node->children.find(run);
    if (it == node->children.end()) break;
    node = it->second.get();
    touch(node, now);
    (void)pool.retain(node->block);  // the cache holds it, so it is allocated
    blocks.push_back(node->block);
  }
  return blocks;
}

Result<PrefixCache::Node*> PrefixCache::insert(BlockPool& pool, Node* parent, int64_t from_block, int64_t to_block,
                                               std::span<const int32_t> tokens, BlockTable& table) {
  Node* node = parent ? parent : root_.get();
  const std::span<const int32_t> blocks = table.blocks();
  const uint64_t now = ++clock_;
  if (to_block > int64_t(blocks.size()))
    return makeError("prefix cache: block {} is past the table's {}", to_block, blocks.size());
  for (int64_t b = from_block; b < to_block; ++b) {
    if ((b + 1) * page_size_ > int64_t(tokens.size()))
      return makeError("prefix cache: block {} needs tokens up to {}, the sequence has {}", b,
                       (b + 1) * page_size_, tokens.size());
    std::vector<int32_t> run(tokens.begin() + b * page_size_, tokens.begin() + (b + 1) * page_size_);
    auto it = node->children.find(run);
    if (it != node->children.end()) {
      Node* cached = it->second.get();
      if (cached->block != blocks[size_t(b)]) {
        KILN_RETURN_IF_ERROR(pool.retain(cached->block));
        KILN_RETURN_IF_ERROR(table.replaceBlock(pool, b, cached->block));
      }
      node = cached;
    } else {
      auto child = std::make_unique<Node>();
      child->parent = node;
      child->run = run;
      child->block = blocks[size_t(b)];
      child->last_used = now;
      KILN_RETURN_IF_ERROR(pool.retain(child->block));
      KILN_RETURN_IF_ERROR(pool.setCached(child->block, true));
      Node* raw = child.get();
      if (node->children.empty()) leaves_.erase({node->last_used, node});  // no longer a leaf
      node->children.emplace(std::move(run), std::move(child));
      leaves_.insert({now, raw});
      ++nodes_;
      node = raw;
    }
    touch(node, now);
  }
  return node == root_.get() ? nullptr : node;
}

int64_t PrefixCache::evict(BlockPool& pool, int64_t count) {
  int64_t freed = 0;
  for (auto it = leaves_.begin(); freed < count && it != leaves_.end();) {
    Node* leaf = it->second;
    if (pool.refCount(leaf->block) != 1) {  // a sequence holds it
      ++it;
      continue;
    }
    it = leaves_.erase(it);
    Node* parent = leaf->parent;
    (void)pool.setCached(leaf->block, false);
    (void)pool.release(leaf->block);
    parent->children.erase(leaf->run);  // destroys `leaf`
    --nodes_;
    ++freed;
    // The parent, used before its child, may now be the oldest leaf: its
    // place is at or before the iterator's.
    if (parent != root_.get() && parent->children.empty()) it = leaves_.insert({parent->last_used, parent}).first;
  }
  return freed;
}

void PrefixCache::clear(BlockPool& pool) {
  std::vector<Node*> stack{root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& [run, child] : n->children) {
      (void)pool.setCached(child->block, false);
      (void)pool.release(child->block);
      stack.push_back(child.get());
    }
  }
  root_ = std::make_unique<Node>();
  leaves_.clear();
  nodes_ = 0;
}

}  // namespace kiln
