#include "runtime/backend/tree_verify.h"

#include <gtest/gtest.h>

#include <vector>

namespace kiln {
namespace {

// Two rows: a chain root -> 1 -> 2, and the tree root -> {1, 2}, 1 -> 3.
const std::vector<int32_t> kParents = {-1, 0, 1, -1, 0, 0, 1};
const std::vector<int32_t> kQueryStart = {0, 3, 7};

TEST(TreeVerify, PositionsAreBasePlusDepth) {
  std::vector<int32_t> positions(7);
  treePositions(kParents, std::vector<int32_t>{10, 40}, kQueryStart, positions.data());
  EXPECT_EQ(positions, (std::vector<int32_t>{10, 11, 12, 40, 41, 41, 42}));
}

TEST(TreeVerify, MaskRowsHoldEachNodesAncestors) {
  std::vector<uint8_t> mask(7 * 4, 9);
  treeAncestorMask(kParents, kQueryStart, 4, mask.data());
  EXPECT_EQ(mask, (std::vector<uint8_t>{1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0,  // chain
                                        1, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1, 1, 0, 1}));
}

TEST(TreeVerify, ParentsAreChecked) {
  EXPECT_TRUE(checkTreeParents(kParents, kQueryStart, 4).ok());
  Status big = checkTreeParents(kParents, kQueryStart, 3);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().message, "verify: sequence 1 brings a tree of 4 nodes; the plan's tree holds 3");
  std::vector<int32_t> forward = {-1, 0, 1, -1, 0, 3, 1};
  Status bad = checkTreeParents(forward, kQueryStart, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "verify: parents[5] = 3 (node 2 of sequence 1); expected an earlier node of the same tree");
}

TEST(TreeVerify, GreedyAcceptanceFollowsTheArgmax) {
  // vocab 4; logits rows' argmax: chain 1, 3, 0; tree 2, 0, 1, 3.
  const std::vector<float> logits = {0, 5, 0, 0, 0, 0, 0, 5, 5, 0, 0, 0,
                                     0, 0, 5, 0, 5, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 5};
  // Chain drafts 1, 3: both accepted. Tree drafts 1 (wrong), 2 (right),
  // and 1's child: the second sibling is taken, and its subtree is empty.
  const std::vector<int32_t> tokens = {7, 1, 3, 7, 1, 2, 0};
  std::vector<int32_t> accepted(2 * 3), count(2);
  acceptGreedy(logits, 4, tokens, kParents, kQueryStart, 3, accepted.data(), count.data());
  EXPECT_EQ(accepted, (std::vector<int32_t>{0, 1, 2, 0, 2, -1}));
  EXPECT_EQ(count, (std::vector<int32_t>{2, 1}));
  // The rows' argmax given instead (a backend's device argmax): the same walk.
  std::vector<int32_t> from_targets(2 * 3), target_count(2);
  acceptGreedyTargets(std::vector<int32_t>{1, 3, 0, 2, 0, 1, 3}, tokens, kParents, kQueryStart, 3,
                      from_targets.data(), target_count.data());
  EXPECT_EQ(from_targets, accepted);
  EXPECT_EQ(target_count, count);
}

}  // namespace
}  // namespace kiln
