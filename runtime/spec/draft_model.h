// A small draft model as a Drafter: a model with the target's vocabulary,
// on the target's backend kind, with its own executor and KV block pool.
// Per sequence it keeps the KV of the tokens it has seen; each step it
// rolls that back to the prefix the target accepted, catches up on the
// tokens since (a prefill), and drafts greedily: the top widths[d] tokens
// of each node at depth d (a chain: the argmax, k times). Every depth is
// one forward over all the step's rows: a chain row feeds its newest
// draft token (a decode row); a tree row runs the draft's verify entry
// over its tree so far, so each node attends to its own ancestors only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/spec/drafter.h"

namespace kiln::spec {

class DraftModelDrafter final : public Drafter {
 public:
  // `backend`: the draft model's executor and its own block pool.
  explicit DraftModelDrafter(std::unique_ptr<Backend> backend);

  Status propose(std::span<const DraftRequest> rows) override;
  void retain(std::span<const int64_t> sequences) override;

  Backend& backend() { return *backend_; }
  // Sequences holding draft KV.
  int64_t sequences() const { return int64_t(states_.size()); }

 private:
  struct SequenceState {
    explicit SequenceState(int page_size) : table(page_size) {}
    // table's first tokens.size() slots hold the keys and values of
    // `tokens`; slots past them (draft nodes) are written again before read.
    BlockTable table;
    std::vector<int32_t> tokens;
  };
  // A row of one draft forward: `count` tokens at table positions from
  // `begin` (a verify row: the tree's nodes, root at `begin`).
  struct Piece {
    size_t row;
    SequenceState* state;
    int64_t begin, count;
    const DraftTree* tree;  // verify rows only
  };
  // A row that drafts this step: its state, the history's length, and the
  // tokens whose KV is kept from earlier steps.
  struct Active {
    size_t row;
    SequenceState* state;
    int64_t len, keep;
  };
  // Runs `pieces` as one forward (or verify when `verify`) into logits_.
  Status run(std::span<const Piece> pieces, bool verify);
  // Adds the `width` best tokens of `logits` as children of `node`.
  void addChildren(std::span<const float> logits, int64_t width, int32_t node, DraftTree& tree);

  std::unique_ptr<Backend> backend_;
  int page_size_;
  int64_t vocab_;
  std::unordered_map<int64_t, SequenceState> states_;
  // Reused per call.
  std::vector<Active> active_;
  std::vector<Piece> pieces_, chains_, trees_;
  std::vector<int32_t> tokens_, positions_, slots_, tables_, query_start_, kv_lens_, parents_, base_;
  std::vector<int32_t> accepted_, counts_, depths_, best_;
  std::vector<float> logits_;
};

}  // namespace kiln::spec
