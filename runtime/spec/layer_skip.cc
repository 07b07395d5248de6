#include "runtime/spec/layer_skip.h"

#include <algorithm>

#include "runtime/kv/block_pool.h"

namespace kiln::spec {

void addTopChildren(std::span<const float> logits, int64_t width, int32_t node, DraftTree& tree) {
  // An insertion into a short sorted list of the best so far.
  const int64_t keep = std::min<int64_t>(width, int64_t(logits.size()));
  std::vector<int32_t> best(size_t(std::max<int64_t>(keep, 0)));
  int64_t held = 0;
  for (int32_t v = 0; v < int32_t(logits.size()) && keep > 0; ++v) {
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

Status LayerSkipDrafter::run(std::span<const DraftRequest> rows, std::span<const Piece> pieces) {
  size_t max_blocks = 0;
  for (const Piece& p : pieces) max_blocks = std::max(max_blocks, rows[p.row].table->blocks().size());
  tokens_.clear();
  positions_.clear();
  parents_.clear();
  base_.clear();
  slots_.clear();
  kv_lens_.clear();
  query_start_.assign(1, 0);
  tables_.assign(pieces.size() * max_blocks, 0);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    const DraftRequest& row = rows[p.row];
    const DraftTree& tree = *row.out;
    const size_t start = tokens_.size();
    for (int64_t j = 0; j < p.count; ++j) {
      tokens_.push_back(tree.tokens[size_t(p.first + j)]);
      // A piece is a whole tree (parents as they are) or one node alone.
      const int32_t parent = p.first == 0 ? tree.parents[size_t(j)] : -1;
      parents_.push_back(parent);
      positions_.push_back(parent < 0 ? int32_t(p.begin) : positions_[start + size_t(parent)] + 1);
    }
    base_.push_back(int32_t(p.begin));
    slots_.resize(tokens_.size());
    KILN_RETURN_IF_ERROR(row.table->slots(p.begin, std::span(slots_).subspan(slots_.size() - size_t(p.count))));
    std::span<const int32_t> blocks = row.table->blocks();
    std::copy(blocks.begin(), blocks.end(), tables_.begin() + int64_t(i * max_blocks));
    query_start_.push_back(int32_t(tokens_.size()));
    kv_lens_.push_back(int32_t(p.begin + p.count));
  }
  BatchInputs in;
  in.tokens = tokens_;
  in.positions = positions_;
  in.slot_mapping = slots_;
  in.block_tables = tables_;
  in.max_blocks = int(max_blocks);
  in.query_start = query_start_;
  in.kv_lens = kv_lens_;
  in.parents = parents_;
  in.base_positions = base_;
  logits_.resize(tokens_.size() * size_t(target_.vocabSize()));
  return target_.draft(in, logits_);
}

Status LayerSkipDrafter::propose(std::span<const DraftRequest> rows) {
  const int64_t vocab = target_.vocabSize(), budget = target_.maxTokens();
  int64_t max_depth = 0;
  for (const DraftRequest& row : rows) {
    row.out->reset(row.history.empty() ? 0 : row.history.back());
    if (row.table && !row.history.empty()) max_depth = std::max(max_depth, row.shape.depth());
  }
  Status status;
  for (int64_t d = 0; d < max_depth && status.ok(); ++d) {
    // Each row's nodes at depth d get their children from this call.
    pieces_.clear();
    for (size_t r = 0; r < rows.size(); ++r) {
      const DraftRequest& row = rows[r];
      const DraftTree& tree = *row.out;
      if (!row.table || row.history.empty() || d >= row.shape.depth()) continue;
      const int64_t root = int64_t(row.history.size()) - 1;
      if (tree.size() == d + 1)  // still a chain: its newest node alone
        pieces_.push_back({r, d, 1, root + d});
      else if (tree.size() > d + 1)
        pieces_.push_back({r, 0, tree.size(), root});
    }
    for (size_t first = 0; first < pieces_.size() && status.ok();) {
      size_t n = 0;
      for (int64_t used = 0; first + n < pieces_.size() && used + pieces_[first + n].count <= budget; ++n)
        used += pieces_[first + n].count;
      if (n == 0) {
        status = makeError("a draft tree of {} nodes exceeds the {} tokens a forward", pieces_[first].count, budget);
        break;
      }
      std::span<const Piece> part(pieces_.data() + first, n);
      status = run(rows, part);
      if (!status.ok()) break;
      int64_t at = 0;  // the part's first logits row of each piece
      for (const Piece& p : part) {
        const DraftRequest& row = rows[p.row];
        DraftTree& tree = *row.out;
        const int64_t width = row.shape.widths[size_t(d)];
        if (p.count == 1 && p.first == d) {
          addTopChildren(std::span<const float>(logits_).subspan(size_t(at * vocab), size_t(vocab)), width,
                         int32_t(d), tree);
        } else {
          const int64_t nodes = p.count;
          depths_.assign(size_t(nodes), 0);
          for (int64_t j = 1; j < nodes; ++j) depths_[size_t(j)] = depths_[size_t(tree.parents[size_t(j)])] + 1;
          for (int64_t j = 0; j < nodes; ++j)
            if (depths_[size_t(j)] == d)
              addTopChildren(std::span<const float>(logits_).subspan(size_t((at + j) * vocab), size_t(vocab)),
                             width, int32_t(j), tree);
        }
        at += p.count;
      }
      first += n;
    }
  }
  if (!status.ok())
    for (const DraftRequest& row : rows) row.out->reset(row.history.empty() ? 0 : row.history.back());
  return status;
}

}  // namespace kiln::spec
