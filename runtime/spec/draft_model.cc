#include "runtime/spec/draft_model.h"

#include <algorithm>
#include <unordered_set>

namespace kiln::spec {

DraftModelDrafter::DraftModelDrafter(std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)),
      page_size_(backend_->blockPool().config().page_size),
      vocab_(backend_->vocabSize()) {}

void DraftModelDrafter::retain(std::span<const int64_t> sequences) {
  const std::unordered_set<int64_t> live(sequences.begin(), sequences.end());
  for (auto it = states_.begin(); it != states_.end();) {
    if (live.contains(it->first)) {
      ++it;
      continue;
    }
    it->second.table.release(backend_->blockPool());
    it = states_.erase(it);
  }
}

void DraftModelDrafter::addChildren(std::span<const float> logits, int64_t width, int32_t node, DraftTree& tree) {
  // The `width` largest logits, best first (the first index on ties, as
  // greedy sampling takes): an insertion into a short sorted list.
  std::vector<int32_t>& best = best_;
  const int64_t keep = std::min<int64_t>(width, int64_t(logits.size()));
  best.resize(size_t(keep));
  int64_t held = 0;
  for (int32_t v = 0; v < int32_t(logits.size()); ++v) {
    if (held == keep && logits[size_t(v)] <= logits[size_t(best[size_t(held - 1)])]) continue;
    int64_t at = held < keep ? held++ : keep - 1;
    while (at > 0 && logits[size_t(v)] > logits[size_t(best[size_t(at - 1)])]) {
      best[size_t(at)] = best[size_t(at - 1)];
      --at;
    }
    best[size_t(at)] = v;
  }
  for (int64_t i = 0; i < held; ++i) tree.add(node, best[size_t(i)]);
}

Status DraftModelDrafter::run(std::span<const Piece> pieces, bool verify) {
  size_t max_blocks = 0;
  for (const Piece& p : pieces) max_blocks = std::max(max_blocks, p.state->table.blocks().size());
  tokens_.clear();
  positions_.clear();
  parents_.clear();
  base_.clear();
  query_start_.assign(1, 0);
  kv_lens_.clear();
  tables_.assign(pieces.size() * max_blocks, 0);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    if (verify) {
      // Node j at table position begin + j, its position its depth's.
      const size_t first = positions_.size();
      for (int64_t j = 0; j < p.count; ++j) {
        const int32_t parent = p.tree->parents[size_t(j)];
        tokens_.push_back(p.tree->tokens[size_t(j)]);
        parents_.push_back(parent);
        positions_.push_back(parent < 0 ? int32_t(p.begin) : positions_[first + size_t(parent)] + 1);
      }
      base_.push_back(int32_t(p.begin));
    } else {
      for (int64_t j = 0; j < p.count; ++j) {
        tokens_.push_back(p.state->tokens[size_t(p.begin + j)]);
        positions_.push_back(int32_t(p.begin + j));
      }
    }
    std::span<const int32_t> blocks = p.state->table.blocks();
    std::copy(blocks.begin(), blocks.end(), tables_.begin() + int64_t(i * max_blocks));
    query_start_.push_back(int32_t(tokens_.size()));
    kv_lens_.push_back(int32_t(p.begin + p.count));
  }
  slots_.resize(tokens_.size());
  for (size_t i = 0; i < pieces.size(); ++i)
    KILN_RETURN_IF_ERROR(pieces[i].state->table.slots(
        pieces[i].begin, std::span(slots_).subspan(size_t(query_start_[i]), size_t(pieces[i].count))));
  BatchInputs in;
  in.tokens = tokens_;
  in.positions = positions_;
  in.slot_mapping = slots_;
  in.block_tables = tables_;
  in.max_blocks = int(max_blocks);
  in.query_start = query_start_;
  in.kv_lens = kv_lens_;
  if (!verify) {
    logits_.resize(pieces.size() * size_t(vocab_));
    return backend_->forward(in, logits_);
  }
  in.parents = parents_;
  in.base_positions = base_;
  logits_.resize(tokens_.size() * size_t(vocab_));
  accepted_.resize(pieces.size() * size_t(backend_->verifyTreeDepth() + 1));
  counts_.resize(pieces.size());
  return backend_->verify(in, logits_, accepted_, counts_);
}

Status DraftModelDrafter::propose(std::span<const DraftRequest> rows) {
  BlockPool& pool = backend_->blockPool();
  const int64_t budget = backend_->maxTokens();
  std::vector<Active>& active = active_;
  active.clear();
  for (size_t r = 0; r < rows.size(); ++r) {
    const DraftRequest& row = rows[r];
    const int64_t len = int64_t(row.history.size());
    row.out->reset(len > 0 ? row.history.back() : 0);
    if (len == 0 || row.shape.depth() == 0) continue;
    SequenceState& state = states_.try_emplace(row.sequence, page_size_).first->second;
    // Roll back to what the history still shares; the root is computed
    // again for its logits when nothing after it changed.
    const int64_t shared = std::mismatch(state.tokens.begin(), state.tokens.end(), row.history.begin(),
                                         row.history.end()).first - state.tokens.begin();
    const int64_t keep = std::min(shared, len - 1);
    state.tokens.resize(size_t(keep));
    // Room for the history and every node of the tree past the root.
    if (!state.table.truncate(pool, keep).ok() ||
        !state.table.append(pool, len - 1 + row.shape.nodes() - keep).ok()) {
      state.table.release(pool);  // no room in the draft pool: this row decodes plainly
      states_.erase(row.sequence);
      continue;
    }
    state.tokens.assign(row.history.begin(), row.history.end());
    active.push_back({r, &state, len, keep});
  }
  if (active.empty()) return {};
  auto dropActive = [&] {
    for (const Active& a : active) {
      a.state->table.release(pool);
      states_.erase(rows[a.row].sequence);
      rows[a.row].out->reset(rows[a.row].history.back());
    }
  };

  // Catch-up: every row's tokens since its last step (its whole prompt the
  // first time), chunked to the token budget; a row's last chunk ends at
  // the root and gives the children of depth 1.
  pieces_.clear();
  int64_t used = 0;
  auto flushCatchUp = [&]() -> Status {
    if (pieces_.empty()) return {};
    KILN_RETURN_IF_ERROR(run(pieces_, false));
    for (size_t i = 0; i < pieces_.size(); ++i) {
      const Piece& p = pieces_[i];
      const DraftRequest& row = rows[p.row];
      if (p.begin + p.count == int64_t(row.history.size()))
        addChildren(std::span<const float>(logits_).subspan(i * size_t(vocab_), size_t(vocab_)), row.shape.widths[0],
                    0, *row.out);
    }
    pieces_.clear();
    used = 0;
    return {};
  };
  for (const Active& a : active) {
    for (int64_t begin = a.keep; begin < a.len;) {
      const int64_t count = std::min(a.len - begin, budget - used);
      pieces_.push_back({a.row, a.state, begin, count, nullptr});
      used += count;
      begin += count;
      if (used == budget)
        if (Status ran = flushCatchUp(); !ran.ok()) return dropActive(), ran;
    }
  }
  if (Status ran = flushCatchUp(); !ran.ok()) return dropActive(), ran;

  // Depth by depth: one forward for the rows still a chain (their newest
  // node, a decode row), one verify for the branched ones (their whole tree
  // so far), each chunked to the token budget.
  std::vector<Piece>& chains = chains_;
  std::vector<Piece>& trees = trees_;
  for (int64_t d = 1;; ++d) {
    chains.clear();
    trees.clear();
    for (const Active& a : active) {
      const DraftRequest& row = rows[a.row];
      DraftTree& tree = *row.out;
      if (d >= row.shape.depth() || tree.size() <= d) continue;
      if (tree.size() == d + 1) {
        a.state->tokens.push_back(tree.tokens[size_t(d)]);
        chains.push_back({a.row, a.state, a.len - 1 + d, 1, nullptr});
      } else {
        // Tree nodes sit at their index's slots, not on one path.
        a.state->tokens.resize(size_t(a.len));
        trees.push_back({a.row, a.state, a.len - 1, tree.size(), &tree});
      }
    }
    if (chains.empty() && trees.empty()) break;
    for (size_t first = 0; first < chains.size();) {
      const size_t n = std::min<size_t>(chains.size() - first, size_t(budget));
      std::span<const Piece> part(chains.data() + first, n);
      if (Status ran = run(part, false); !ran.ok()) return dropActive(), ran;
      for (size_t i = 0; i < n; ++i)
        addChildren(std::span<const float>(logits_).subspan(i * size_t(vocab_), size_t(vocab_)),
                    rows[part[i].row].shape.widths[size_t(d)], int32_t(d), *rows[part[i].row].out);
      first += n;
    }
    for (size_t first = 0; first < trees.size();) {
      size_t n = 0;
      for (int64_t tokens = 0; first + n < trees.size() && tokens + trees[first + n].count <= budget; ++n)
        tokens += trees[first + n].count;
      if (n == 0)
        return dropActive(),
               makeError("a draft tree of {} nodes exceeds the draft model's {} tokens a forward", trees[first].count,
                         budget);
      std::span<const Piece> part(trees.data() + first, n);
      if (Status ran = run(part, true); !ran.ok()) return dropActive(), ran;
      // The nodes at depth d are the tree's last ones (nodes are added depth
      // by depth); their children come from their own logits rows.
      for (size_t i = 0; i < n; ++i) {
        DraftTree& tree = *rows[part[i].row].out;
        const int64_t nodes = tree.size();
        depths_.assign(size_t(nodes), 0);
        for (int64_t j = 1; j < nodes; ++j) depths_[size_t(j)] = depths_[size_t(tree.parents[size_t(j)])] + 1;
        for (int64_t j = 0; j < nodes; ++j)
          if (depths_[size_t(j)] == d)
            addChildren(std::span<const float>(logits_).subspan(size_t(query_start_[i] + j) * size_t(vocab_),
                                                                size_t(vocab_)),
                        rows[part[i].row].shape.widths[size_t(d)], int32_t(j), tree);
      }
      first += n;
    }
  }
  return {};
}

}  // namespace kiln::spec
