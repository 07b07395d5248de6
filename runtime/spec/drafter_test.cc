#include "runtime/spec/drafter.h"

#include <gtest/gtest.h>

namespace kiln::spec {
namespace {

TEST(TreeShape, ParsesChainsAndWidths) {
  auto chain = parseTreeShape("chain:4");
  ASSERT_TRUE(chain.ok());
  EXPECT_EQ(chain->widths, (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(chain->nodes(), 5);
  EXPECT_TRUE(chain->isChain());
  EXPECT_EQ(chain->text(), "chain:4");
  auto tree = parseTreeShape("widths:2,2,1");
  ASSERT_TRUE(tree.ok());
  EXPECT_EQ(tree->nodes(), 11);  // 1 + 2 + 4 + 4
  EXPECT_EQ(tree->text(), "widths:2,2,1");
  for (const char* bad : {"chain:0", "chain:", "widths:", "widths:2,0", "widths:2,,1", "tree:3", "chain:-1"})
    EXPECT_FALSE(parseTreeShape(bad).ok()) << bad;
}

TEST(NgramDrafter, ChainProposesWhatFollowedTheLongestRecentMatch) {
  NgramDrafter drafter;
  DraftTree out;
  // "1 2 3 4 5 ... 1 2 3": the trigram 1 2 3 was followed by 4 5 6.
  std::vector<int32_t> history = {1, 2, 3, 4, 5, 6, 9, 1, 2, 3};
  drafter.propose(history, TreeShape::chain(3), out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_EQ(out.parents, (std::vector<int32_t>{-1, 0, 1, 2}));
}

TEST(NgramDrafter, FallsBackToShorterGramsAndStopsAtTheEnd) {
  NgramDrafter drafter;
  DraftTree out;
  // No earlier "8 7" or "5 8 7"; the unigram 7 was followed by 1 2.
  drafter.propose(std::vector<int32_t>{7, 1, 2, 5, 8, 7}, TreeShape::chain(4), out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{7, 1, 2, 5, 8}));
  // The most recent match's continuation is cut by the history's end.
  drafter.propose(std::vector<int32_t>{4, 4}, TreeShape::chain(4), out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{4, 4}));
}

TEST(NgramDrafter, NothingToProposeLeavesTheRoot) {
  NgramDrafter drafter;
  DraftTree out;
  drafter.propose(std::vector<int32_t>{1, 2, 3}, TreeShape::chain(4), out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{3}));
  drafter.propose(std::vector<int32_t>{5}, TreeShape::chain(4), out);
  EXPECT_EQ(out.size(), 1);
}

TEST(NgramDrafter, TreeMergesMatchesWithinTheWidths) {
  NgramDrafter drafter;
  DraftTree out;
  // After "1": 2 3 (most recent), 4 5, 6 7. Widths 2,1: two children of the
  // root (2, then 4), one child each.
  std::vector<int32_t> history = {1, 6, 7, 1, 4, 5, 1, 2, 3, 1};
  drafter.propose(history, TreeShape{{2, 1}}, out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(out.parents, (std::vector<int32_t>{-1, 0, 1, 0, 3}));
  // Shared prefixes share nodes: "1 2 3" and "1 2 8" after "1".
  history = {1, 2, 8, 1, 2, 3, 1};
  drafter.propose(history, TreeShape{{2, 2}}, out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{1, 2, 3, 8}));
  EXPECT_EQ(out.parents, (std::vector<int32_t>{-1, 0, 1, 1}));
}

}  // namespace
}  // namespace kiln::spec
