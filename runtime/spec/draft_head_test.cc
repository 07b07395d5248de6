// DraftHeadDrafter over a stand-in target whose LM head is the identity
// (vocabulary = hidden size, logits = z): head k's block gives
// z = h + SiLU(W_k h + b_k), and its tokens are z's largest entries. With
// W_k = 0 and b_k one-hot large at token t_k, head k proposes t_k first and
// h's own largest entry second; trees take every head's top widths; all
// rows and heads go through one LM head call.
#include "runtime/spec/draft_head.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kiln::spec {
namespace {

constexpr int64_t kHidden = 8;

class IdentityHead final : public Backend {
 public:
  IdentityHead()
      : pool_(BlockPool::create({.layers = 1, .num_blocks = 1, .page_size = 16, .kv_heads = 1, .head_dim = 1},
                                KvStorage::kElsewhere)
                  .take()) {}
  Status forward(const BatchInputs&, std::span<float>) override { return makeError("not used"); }
  BlockPool& blockPool() override { return pool_; }
  Status copyBlocks(std::span<const BlockCopy>) override { return makeError("not used"); }
  int64_t hiddenSize() const override { return kHidden; }
  Status lmHead(std::span<const float> hidden, int64_t rows, std::span<float> logits) override {
    ++calls;
    last_rows = rows;
    std::copy(hidden.begin(), hidden.begin() + rows * kHidden, logits.begin());
    return {};
  }
  int64_t vocabSize() const override { return kHidden; }
  int64_t maxTokens() const override { return 16; }
  std::string name() const override { return "identity"; }
  int calls = 0;
  int64_t last_rows = 0;

 private:
  BlockPool pool_;
};

// Heads k = 0..2 with W = 0 and b_k = 10 at token 5 - k: head k's best
// token is 5 - k.
DraftHeadWeights heads() {
  DraftHeadWeights w;
  w.hidden = kHidden;
  w.heads = 3;
  w.weight.assign(size_t(3 * kHidden * kHidden), 0.0f);
  w.bias.assign(size_t(3 * kHidden), 0.0f);
  for (int k = 0; k < 3; ++k) w.bias[size_t(k * kHidden + 5 - k)] = 10.0f;
  return w;
}

TEST(DraftHeadDrafter, ChainsTakeEachHeadsArgmaxTreesItsTopWidths) {
  IdentityHead target;
  DraftHeadDrafter drafter(heads(), target);
  // h's largest entry is token 1 (0.5): each head's second choice.
  const std::vector<float> h = {0.1f, 0.5f, 0.2f, 0.0f, 0.0f, 0.0f, 0.0f, 0.3f};
  const std::vector<int32_t> history = {3, 4};
  DraftTree chain, tree, none;
  std::vector<DraftRequest> rows = {{1, history, TreeShape::chain(4), &chain},
                                    {2, history, TreeShape{{2, 1}}, &tree},
                                    {3, history, TreeShape::chain(2), &none}};
  rows[0].hidden = h;
  rows[1].hidden = h;  // row 2 has no hidden state yet: nothing drafted
  ASSERT_TRUE(drafter.propose(rows).ok());
  EXPECT_EQ(target.calls, 1);
  EXPECT_EQ(target.last_rows, 3 + 2);  // depth min(4, 3 heads) and depth 2
  // The chain: heads 0, 1, 2's argmax; no fourth draft (three heads).
  EXPECT_EQ(chain.tokens, (std::vector<int32_t>{4, 5, 4, 3}));
  EXPECT_EQ(chain.parents, (std::vector<int32_t>{-1, 0, 1, 2}));
  // The tree: head 0's top 2 (5, then h's best, 1) under the root, head 1's
  // best (4) under each.
  EXPECT_EQ(tree.tokens, (std::vector<int32_t>{4, 5, 1, 4, 4}));
  EXPECT_EQ(tree.parents, (std::vector<int32_t>{-1, 0, 0, 1, 2}));
  EXPECT_EQ(none.tokens, (std::vector<int32_t>{4}));
}

TEST(DraftHeadDrafter, TheBlockIsAResidualSiluOverTheHiddenState) {
  // One head, W = identity: z_i = h_i + SiLU(h_i); with h = (-3, 1, 2, ...)
  // the order of z follows h's (SiLU is increasing for x > -1.28).
  DraftHeadWeights w;
  w.hidden = kHidden;
  w.heads = 1;
  w.weight.assign(size_t(kHidden * kHidden), 0.0f);
  for (int64_t i = 0; i < kHidden; ++i) w.weight[size_t(i * kHidden + i)] = 1.0f;
  w.bias.assign(size_t(kHidden), 0.0f);
  IdentityHead target;
  DraftHeadDrafter drafter(std::move(w), target);
  const std::vector<float> h = {-3.0f, 1.0f, 2.0f, 0.5f, 0.0f, 0.0f, 0.0f, 1.5f};
  const std::vector<int32_t> history = {0};
  DraftTree out;
  std::vector<DraftRequest> rows = {{1, history, TreeShape{{3}}, &out}};
  rows[0].hidden = h;
  ASSERT_TRUE(drafter.propose(rows).ok());
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{0, 2, 7, 1}));
}

}  // namespace
}  // namespace kiln::spec
