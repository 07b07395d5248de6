// The speculative half of an engine step: drafts proposed for the decode
// rows that speculate, one verify forward over their trees, acceptance
// (greedy in the plan, speculative sampling on the host), and rollback of
// the rejected nodes' KV.
#include <algorithm>

#include <fmt/format.h>

#include "runtime/engine/engine_impl.h"
#include "runtime/sampling/sampler.h"

namespace kiln {

bool Engine::Impl::proposeDrafts(ScheduledStep& plan) {
  drafts.resize(plan.slices.size());
  for (spec::DraftTree& tree : drafts) tree.tokens.clear(), tree.parents.clear();
  if (executor->verifyTreeNodes() == 0) return false;
  BlockPool& pool = executor->blockPool();
  int64_t batch_tokens_now = 0;
  for (const ScheduledSlice& s : plan.slices) batch_tokens_now += s.count;
  bool any = false;
  for (size_t b = 0; b < plan.slices.size(); ++b) {
    const ScheduledSlice& s = plan.slices[b];
    Sequence& seq = *s.seq;
    // A decode row: the sequence's last token alone (a parallel-sampling
    // request's forks start from a forward row's logits).
    if (!seq.spec || s.count != 1 || s.begin + 1 != int64_t(seq.tokens.size()) || !seq.forks.empty()) continue;
    spec::DraftTree& tree = drafts[b];
    tree.reset(seq.tokens.back());
    if (!seq.spec->drafting(seq.generated())) continue;
    // Room: the request's max_tokens and context (a bonus token follows the
    // accepted drafts) and the forward's token budget.
    const int64_t room = std::min({seq.sampler->params().max_tokens - seq.generated() - 1,
                                   context_length - int64_t(seq.tokens.size()) - 1,
                                   executor->maxTokens() - batch_tokens_now});
    if (room <= 0) continue;
    spec::TreeShape shape = seq.spec->tree;
    if (shape.depth() > room) shape.widths.resize(size_t(room));
    seq.spec->drafter->propose(seq.tokens, shape, tree);
    // Later nodes only have earlier parents: cutting the tail keeps a tree.
    if (tree.size() - 1 > room) {
      tree.tokens.resize(size_t(room + 1));
      tree.parents.resize(size_t(room + 1));
    }
    const int64_t extra = tree.size() - 1;
    if (extra == 0) continue;
    // Draft slots come from free or evictable blocks, never by preempting.
    if (!scheduler->makeFree(seq.table.blocksNeeded(pool, extra)) ||
        !seq.table.append(pool, extra, &plan.copies).ok()) {
      tree.reset(seq.tokens.back());
      continue;
    }
    batch_tokens_now += extra;
    any = true;
  }
  return any;
}

void Engine::Impl::sampleTreePath(Sequence& seq, const spec::DraftTree& tree, size_t b, int64_t width) {
  int32_t* path = verify_accepted.data() + b * size_t(width);
  std::fill(path, path + width, -1);
  path[0] = 0;
  spec_history.assign(seq.tokens.begin(), seq.tokens.end());
  int32_t node = 0, depth = 0;
  while (true) {
    spec_children.clear();
    spec_child_tokens.clear();
    for (int32_t c = node + 1; c < int32_t(tree.size()); ++c)
      if (tree.parents[size_t(c)] == node) {
        spec_children.push_back(c);
        spec_child_tokens.push_back(tree.tokens[size_t(c)]);
      }
    const float* row = logits.data() + int64_t(batch_query_start[b] + node) * vocab;
    fork_row.assign(row, row + vocab);
    int32_t token = -1;
    const int child = seq.sampler->speculate(fork_row, spec_history, spec_child_tokens, token);
    if (child < 0 || depth + 1 >= width) {
      verify_next[b] = token;
      break;
    }
    node = spec_children[size_t(child)];
    path[++depth] = node;
    spec_history.push_back(tree.tokens[size_t(node)]);
  }
  verify_counts[b] = depth;
}

Status Engine::Impl::runVerify(ScheduledStep& part, const std::vector<const spec::DraftTree*>& trees) {
  std::vector<ScheduledSlice>& rows = part.slices;
  BatchInputs in;
  KILN_RETURN_IF_ERROR(flatten(rows, &trees, in));
  const int64_t width = executor->verifyTreeDepth() + 1;
  logits.resize(in.tokens.size() * size_t(vocab));
  verify_accepted.resize(rows.size() * size_t(width));
  verify_counts.resize(rows.size());
  BlockPool& pool = executor->blockPool();
  Status verified = executor->verify(in, logits, verify_accepted, verify_counts);
  // The plan's acceptance is greedy; a sampled request walks its tree with
  // speculative sampling instead, which also draws its next token.
  verify_next.assign(rows.size(), -1);
  for (size_t b = 0; b < rows.size() && verified.ok(); ++b)
    if (!rows[b].seq->sampler->params().isPlainGreedy()) sampleTreePath(*rows[b].seq, *trees[b], b, width);
  // Accepted tree nodes move to the slots of their depths (a chain's are
  // there already); they go in path order, and a node's index is at least
  // its depth, so no move reads a slot an earlier one wrote.
  slot_moves.clear();
  for (size_t b = 0; b < rows.size() && verified.ok(); ++b) {
    const int32_t* path = verify_accepted.data() + b * size_t(width);
    for (int32_t d = 1; d <= verify_counts[b]; ++d)
      if (path[d] != d) {
        auto from = rows[b].seq->table.slot(rows[b].begin + path[d]);
        auto to = rows[b].seq->table.slot(rows[b].begin + d);
        if (!from.ok() || !to.ok()) return makeError("verify: an accepted node has no slot");
        slot_moves.push_back({*from, *to});
      }
  }
  if (verified.ok()) verified = executor->copySlots(slot_moves);
  if (!verified.ok()) {
    for (const ScheduledSlice& s : rows) {
      (void)s.seq->table.truncate(pool, s.begin + s.count);
      finish(*s.seq, FinishReason::kError, verified.error().message);
    }
    return Status::success();
  }
  for (size_t b = 0; b < rows.size(); ++b) {
    ScheduledSlice& s = rows[b];
    Sequence& seq = *s.seq;
    const spec::DraftTree& tree = *trees[b];
    const int32_t* path = verify_accepted.data() + b * size_t(width);
    const int32_t accepted = verify_counts[b];
    int32_t last = 0;  // the deepest node whose token is emitted
    for (int32_t d = 1; d <= accepted && !seq.finished; ++d) {
      emitToken(seq, tree.tokens[size_t(path[d])]);
      last = path[d];
    }
    if (!seq.finished) {
      std::span<float> row(logits.data() + int64_t(batch_query_start[b] + last) * vocab, size_t(vocab));
      emitToken(seq, verify_next[b] >= 0 ? verify_next[b] : seq.sampler->sample(row, seq.tokens));
    }
    // The root and the emitted drafts have their keys and values in place;
    // the rejected nodes' slots are dropped, and blocks wholly past them freed.
    const int64_t kept = std::min<int64_t>(1 + accepted, int64_t(seq.tokens.size()) - s.begin);
    s.count = kept;
    KILN_RETURN_IF_ERROR(seq.table.truncate(pool, s.begin + kept));
    if (tree.size() > 1) {
      ++seq.stats.spec_rows;
      seq.stats.spec_drafted_tokens += tree.size() - 1;
      seq.stats.spec_accepted_tokens += kept - 1;
      ++spec_rows;
      spec_drafted += tree.size() - 1;
      spec_accepted += kept - 1;
      seq.spec->record(tree.size() - 1, kept - 1, seq.generated());
    }
  }
  scheduler->commit(part);
  return Status::success();
}

Status Engine::checkSpeculation(const SpeculationParams& speculation) const {
  if (!speculation.enabled()) return {};
  const spec::TreeShape& tree = speculation.tree;
  if (tree.depth() == 0) return makeError("speculative decoding needs at least one draft token (k >= 1)");
  const int64_t nodes = impl_->executor->verifyTreeNodes(), depth = impl_->executor->verifyTreeDepth();
  if (nodes == 0)
    return makeError("speculative decoding needs an artifact with a verify entry on the {} backend: compile it with "
                     "kiln-compile --spec-tree={} (the CPU backend runs it; the CUDA backend does not yet)",
                     impl_->executor->name(), tree.text());
  if (tree.nodes() > nodes || tree.depth() > depth)
    return makeError("the draft tree {} has {} nodes and depth {}, more than the artifact's verify entry holds ({} "
                     "nodes, depth {}): compile with kiln-compile --spec-tree={} or draft less",
                     tree.text(), tree.nodes(), tree.depth(), nodes, depth, tree.text());
  return {};
}

}  // namespace kiln
