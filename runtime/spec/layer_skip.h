// LayerSkip-style self-speculation as a Drafter: the target's own first K
// layers, then its final norm and LM head (the plan's `draft` entry,
// kiln-compile --spec-layerskip K), over the target's weights and KV
// cache. Nothing is kept between steps: the KV of every committed token is
// the target's, whose layers < K are exactly the draft's. Each step, one
// call of the draft entry a depth for all the step's rows: a row still a
// chain runs its newest node alone (a one-node tree at its position, which
// sees every earlier key), a branched row its whole tree so far (the tree
// mask keeps siblings apart). A node's layer < K keys and values go to its
// slot in the target's table, where the verify forward writes them again.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/spec/drafter.h"

namespace kiln::spec {

class LayerSkipDrafter final : public Drafter {
 public:
  // `target`: the target's backend, with a draft entry (draftLayers() > 0).
  explicit LayerSkipDrafter(Backend& target) : target_(target) {}

  // Rows need `table` (the target's, grown for the tree); rows without one
  // draft nothing.
  Status propose(std::span<const DraftRequest> rows) override;

 private:
  // A row of one draft call: tree nodes [first, first + count) of `row`,
  // the first at table position `begin`.
  struct Piece {
    size_t row;
    int64_t first, count, begin;
  };
  Status run(std::span<const DraftRequest> rows, std::span<const Piece> pieces);

  Backend& target_;
  std::vector<Piece> pieces_;
  std::vector<int32_t> tokens_, positions_, parents_, base_, slots_, tables_, query_start_, kv_lens_, depths_;
  std::vector<float> logits_;
};

// Adds the `width` tokens of largest logit (first index on ties, greedy's
// rule), best first, as children of `node`.
void addTopChildren(std::span<const float> logits, int64_t width, int32_t node, DraftTree& tree);

}  // namespace kiln::spec
