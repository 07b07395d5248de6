// Speculative decoding's draft side: a Drafter proposes, for every row of
// a step that speculates, a tree of tokens that may follow the sequence so
// far; the target model checks every node in one verify forward
// (runtime/backend/tree_verify.h) and the engine keeps the longest path it
// agrees with. The n-gram prompt-lookup drafter is here, a small draft
// model in draft_model.h; a self-draft (early exit: part of the target's
// layers) or a trained head (reading the target's hidden states) are other
// Drafters behind the same interface, given the target's backend when made.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/support/error.h"

namespace kiln {
class BlockTable;
}

namespace kiln::spec {

// The shape drafts may take: at depth d + 1, at most widths[d] children a
// node. A chain of k tokens is widths {1, ..., 1} (k ones).
struct TreeShape {
  std::vector<int64_t> widths;

  static TreeShape chain(int64_t k) { return {std::vector<int64_t>(size_t(k), 1)}; }
  int64_t depth() const { return int64_t(widths.size()); }
  // Nodes of the full tree, the root included.
  int64_t nodes() const;
  bool isChain() const;
  // "chain:4" or "widths:2,2,1", as kiln-compile's --spec-tree spells it.
  std::string text() const;
};

// Parses kiln-compile's --spec-tree value (chain:K or widths:W1,W2,...).
Result<TreeShape> parseTreeShape(std::string_view text);

// One proposal, in the verify layout: node 0 is the root (the sequence's
// last token, parent -1), every other node's parent an earlier node; a
// node's depth is its distance from the root.
struct DraftTree {
  std::vector<int32_t> tokens;
  std::vector<int32_t> parents;

  int64_t size() const { return int64_t(tokens.size()); }
  void reset(int32_t root) {
    tokens.assign(1, root);
    parents.assign(1, -1);
  }
  int32_t add(int32_t parent, int32_t token) {
    tokens.push_back(token);
    parents.push_back(parent);
    return int32_t(tokens.size() - 1);
  }
};

// One row of a step's drafting.
struct DraftRequest {
  // The engine's id of the sequence; a drafter with state per sequence (a
  // draft model's KV) keys it by this.
  int64_t sequence = 0;
  // The prompt and every token generated; the last is the tree's root.
  std::span<const int32_t> history;
  TreeShape shape;  // already cut to the room the step has
  DraftTree* out = nullptr;
  // The target's table, holding slots for the root (table position
  // history.size() - 1) and every node of `shape` after it: for drafters
  // that write the target's own KV (LayerSkipDrafter); null for others.
  const BlockTable* table = nullptr;
  // The target's hidden state (the LM head's input) at the token before
  // the root, whose logits gave the root: for drafters that read it
  // (DraftHeadDrafter); empty for others, or before the first forward.
  std::span<const float> hidden;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Proposes a tree into every row's `out`, within its shape, all rows of a
  // step at once (a model drafter runs one batched forward a depth); an
  // `out` may hold the root alone when there is nothing to propose. An
  // error leaves every row's root alone (the step decodes plainly).
  virtual Status propose(std::span<const DraftRequest> rows) = 0;
  // The sequences still running with this drafter; the state of every other
  // one (finished, cancelled, preempted) is dropped, its memory freed.
  virtual void retain(std::span<const int64_t> sequences) { (void)sequences; }
};

// Prompt lookup: the last n tokens of the history (n = max_ngram down to 1)
// are looked up earlier in the history, most recent occurrence first, and
// the tokens that followed them are proposed. The continuations of the
// matches are merged in that order (longer n first, then more recent),
// each depth keeping at most its width of distinct children a node, until
// the shape is full: a chain is the first match's continuation, made longer
// by older matches that agree with it where the history's end cut it short
// (a repetition with a period under k).
class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(int max_ngram = 3) : max_ngram_(max_ngram) {}
  Status propose(std::span<const DraftRequest> rows) override;
  // One row: drafts after `history` into `out`.
  void propose(std::span<const int32_t> history, const TreeShape& shape, DraftTree& out);

 private:
  int max_ngram_;
};

}  // namespace kiln::spec
