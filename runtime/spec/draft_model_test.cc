// DraftModelDrafter over a toy draft model whose next token is a function of
// the whole context it reads from its KV slots: drafts that come out right
// after a rollback and catch-up prove the KV held exactly the history;
// every depth is one call for all rows; retain frees what others held.
#include "runtime/spec/draft_model.h"

#include <map>

#include <gtest/gtest.h>

namespace kiln::spec {
namespace {

constexpr int64_t kVocab = 50;
constexpr int kPage = 4;

// The toy model: the best next token after `context`, and the second best
// one above it.
int32_t nextToken(const std::vector<int32_t>& context) {
  int64_t h = 7;
  for (int32_t t : context) h = (h * 31 + t) % 1000003;
  return int32_t(h % kVocab);
}

class ToyDraftBackend final : public Backend {
 public:
  explicit ToyDraftBackend(int64_t blocks)
      : pool_(BlockPool::create({.layers = 1, .num_blocks = blocks, .page_size = kPage, .kv_heads = 1, .head_dim = 1},
                                KvStorage::kElsewhere)
                  .take()),
        slots_(size_t(blocks * kPage), -1) {}

  Status forward(const BatchInputs& in, std::span<float> logits) override {
    ++calls;
    write(in);
    for (size_t b = 0; b + 1 < in.query_start.size(); ++b) {
      std::vector<int32_t> context;
      for (int64_t p = 0; p < in.kv_lens[b]; ++p) context.push_back(read(in, b, p));
      score(context, logits.subspan(b * kVocab, kVocab));
    }
    return {};
  }
  int64_t verifyTreeNodes() const override { return 64; }
  int64_t verifyTreeDepth() const override { return 8; }
  Status verify(const BatchInputs& in, std::span<float> logits, std::span<int32_t>, std::span<int32_t>) override {
    ++calls;
    write(in);
    for (size_t b = 0; b + 1 < in.query_start.size(); ++b) {
      const int32_t first = in.query_start[b];
      for (int32_t i = first; i < in.query_start[b + 1]; ++i) {
        // The committed keys, then the node's path from the root.
        std::vector<int32_t> path;
        for (int32_t n = i - first; n >= 0; n = in.parents[size_t(first + n)])
          path.insert(path.begin(), in.tokens[size_t(first + n)]);
        std::vector<int32_t> context;
        for (int64_t p = 0; p < in.base_positions[b]; ++p) context.push_back(read(in, b, p));
        context.insert(context.end(), path.begin(), path.end());
        score(context, logits.subspan(size_t(i) * kVocab, kVocab));
      }
    }
    return {};
  }
  BlockPool& blockPool() override { return pool_; }
  Status copyBlocks(std::span<const BlockCopy>) override { return makeError("no copies expected"); }
  int64_t vocabSize() const override { return kVocab; }
  int64_t maxTokens() const override { return 16; }
  std::string name() const override { return "toy"; }

  int calls = 0;

 private:
  void write(const BatchInputs& in) {
    for (size_t i = 0; i < in.tokens.size(); ++i) slots_[size_t(in.slot_mapping[i])] = in.tokens[i];
  }
  int32_t read(const BatchInputs& in, size_t b, int64_t p) const {
    const int32_t block = in.block_tables[b * size_t(in.max_blocks) + size_t(p / kPage)];
    return slots_[size_t(block * kPage + p % kPage)];
  }
  static void score(const std::vector<int32_t>& context, std::span<float> row) {
    std::fill(row.begin(), row.end(), 0.0f);
    const int32_t best = nextToken(context);
    row[size_t(best)] = 2.0f;
    row[size_t((best + 1) % kVocab)] = 1.0f;
  }

  BlockPool pool_;
  std::vector<int32_t> slots_;
};

// The greedy chain the toy model continues `history` with.
std::vector<int32_t> greedyChain(std::vector<int32_t> history, int k) {
  std::vector<int32_t> out{history.back()};
  for (int i = 0; i < k; ++i) {
    history.push_back(nextToken(history));
    out.push_back(history.back());
  }
  return out;
}

struct Rows {
  std::vector<std::vector<int32_t>> histories;
  std::vector<DraftTree> trees;
  std::vector<DraftRequest> requests;
  Rows(std::vector<std::vector<int32_t>> h, const TreeShape& shape) : histories(std::move(h)), trees(histories.size()) {
    for (size_t i = 0; i < histories.size(); ++i) requests.push_back({int64_t(i + 1), histories[i], shape, &trees[i]});
  }
};

TEST(DraftModelDrafter, ChainsAreTheModelsGreedyContinuationOneCallADepth) {
  auto owned = std::make_unique<ToyDraftBackend>(64);
  ToyDraftBackend& toy = *owned;
  DraftModelDrafter drafter(std::move(owned));
  Rows rows({{1, 2, 3, 4, 5, 6, 7}, {9, 8}, {3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}}, TreeShape::chain(4));
  ASSERT_TRUE(drafter.propose(rows.requests).ok());
  // The catch-up of 7 + 2 + 11 prompt tokens takes two forwards of the
  // budget of 16, then one forward a depth serves all rows.
  EXPECT_EQ(toy.calls, 2 + 3);
  for (size_t i = 0; i < rows.trees.size(); ++i) {
    EXPECT_EQ(rows.trees[i].tokens, greedyChain(rows.histories[i], 4)) << "row " << i;
    EXPECT_EQ(rows.trees[i].parents, (std::vector<int32_t>{-1, 0, 1, 2, 3}));
  }

  // The target accepted two drafts of row 0 and then chose its own token;
  // row 1 accepted none (a different token); row 2 all four and the bonus.
  const std::vector<int32_t> chain0 = rows.trees[0].tokens, chain2 = rows.trees[2].tokens;
  rows.histories[0].insert(rows.histories[0].end(), {chain0[1], chain0[2], 42});
  rows.histories[1].push_back(17);
  rows.histories[2].insert(rows.histories[2].end(), chain2.begin() + 1, chain2.end());
  rows.histories[2].push_back(nextToken(rows.histories[2]));
  for (size_t i = 0; i < rows.trees.size(); ++i) rows.requests[i].history = rows.histories[i];
  toy.calls = 0;
  ASSERT_TRUE(drafter.propose(rows.requests).ok());
  EXPECT_EQ(toy.calls, 4);  // the catch-ups are short: one forward, then three depths
  for (size_t i = 0; i < rows.trees.size(); ++i)
    EXPECT_EQ(rows.trees[i].tokens, greedyChain(rows.histories[i], 4)) << "row " << i << " after rollback";

  EXPECT_EQ(drafter.sequences(), 3);
  const int64_t free_before = toy.blockPool().numFree();
  drafter.retain(std::vector<int64_t>{2});
  EXPECT_EQ(drafter.sequences(), 1);
  EXPECT_GT(toy.blockPool().numFree(), free_before);
  drafter.retain({});
  EXPECT_EQ(toy.blockPool().numFree(), toy.blockPool().numBlocks());
}

TEST(DraftModelDrafter, TreesTakeTheTopWidthsOfEachNode) {
  DraftModelDrafter drafter(std::make_unique<ToyDraftBackend>(64));
  const std::vector<int32_t> history{5, 6, 7};
  Rows rows({history}, TreeShape{{2, 2}});
  ASSERT_TRUE(drafter.propose(rows.requests).ok());
  const DraftTree& tree = rows.trees[0];
  ASSERT_EQ(tree.size(), 7);
  EXPECT_EQ(tree.parents, (std::vector<int32_t>{-1, 0, 0, 1, 1, 2, 2}));
  const int32_t a = nextToken(history);
  EXPECT_EQ(tree.tokens[1], a);
  EXPECT_EQ(tree.tokens[2], (a + 1) % kVocab);
  for (int child = 1; child <= 2; ++child) {
    std::vector<int32_t> path = history;
    path.push_back(tree.tokens[size_t(child)]);
    const int32_t b = nextToken(path);
    EXPECT_EQ(tree.tokens[size_t(2 * child + 1)], b) << "child " << child;
    EXPECT_EQ(tree.tokens[size_t(2 * child + 2)], (b + 1) % kVocab) << "child " << child;
  }
  // The next step after a branch the target took: the tree nodes' slots
  // are not a path, so the catch-up recomputes from the history.
  std::vector<int32_t> next = history;
  next.insert(next.end(), {tree.tokens[2], tree.tokens[6], 11});
  rows.requests[0].history = next;
  rows.requests[0].shape = TreeShape::chain(3);
  ASSERT_TRUE(drafter.propose(rows.requests).ok());
  EXPECT_EQ(rows.trees[0].tokens, greedyChain(next, 3));
}

TEST(DraftModelDrafter, ARowWithoutRoomInThePoolDraftsNothing) {
  DraftModelDrafter drafter(std::make_unique<ToyDraftBackend>(2));  // 8 slots
  Rows rows({{1, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}, TreeShape::chain(2));
  ASSERT_TRUE(drafter.propose(rows.requests).ok());
  EXPECT_EQ(rows.trees[0].size(), 3);
  EXPECT_EQ(rows.trees[1].size(), 1);
  EXPECT_EQ(drafter.sequences(), 1);
}

}  // namespace
}  // namespace kiln::spec
