// Speculative verify's host-side index work, shared by both executors: the
// positions and ancestor mask of a ragged batch of draft trees, and the
// greedy acceptance walk over the verify forward's per-node logits
// (the plan's tree_positions, tree_mask and accept steps).
//
// A batch row b holds one tree: nodes [query_start[b], query_start[b+1]),
// numbered locally from 0 (the root: the sequence's last committed token,
// parent -1); every other node's parent is an earlier local index. The
// nodes' keys are the sequence's last q_len keys, in local order.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/support/error.h"

namespace kiln {

// parents [N] against query_start [B+1]: each tree's root first with parent
// -1, every other parent an earlier node of the same tree, and at most
// `max_nodes` nodes a tree (the mask's width). The error names the index.
Status checkTreeParents(std::span<const int32_t> parents, std::span<const int32_t> query_start, int64_t max_nodes);

// positions [N] = base_positions[b] + depth(node).
void treePositions(std::span<const int32_t> parents, std::span<const int32_t> base_positions,
                   std::span<const int32_t> query_start, int32_t* positions);

// mask [N, stride] u8: row i holds 1 at node i's local index and at each of
// its ancestors', 0 elsewhere.
void treeAncestorMask(std::span<const int32_t> parents, std::span<const int32_t> query_start, int64_t stride,
                      uint8_t* mask);

// Greedy acceptance: from each root, the child whose draft token is the
// argmax of its parent's logits row (the first such child; the argmax's
// ties go to the lowest id, NaNs skipped, as the greedy sampler's), until
// none is. logits [N, vocab]. accepted [B, width]: the path's local
// indices from the root (0), -1 padded; count [B]: accepted draft tokens.
void acceptGreedy(std::span<const float> logits, int64_t vocab, std::span<const int32_t> tokens,
                  std::span<const int32_t> parents, std::span<const int32_t> query_start, int64_t width,
                  int32_t* accepted, int32_t* count);

// The same walk given each node's argmax (targets [N], by the same rule),
// for a backend that computes it where the logits are.
void acceptGreedyTargets(std::span<const int32_t> targets, std::span<const int32_t> tokens,
                         std::span<const int32_t> parents, std::span<const int32_t> query_start, int64_t width,
                         int32_t* accepted, int32_t* count);

}  // namespace kiln
