// The verify entry (kiln-compile --spec-tree) on the tiny random Llama
// (test/fixtures/tiny-llama/artifact-spec, tree widths:2,2,1): every node of
// a draft tree gets the logits that decoding its path token by token gives,
// and the accepted path follows the argmax. Attention is computed as for a
// decode token; this checkpoint's f32 GEMMs round differently over a tree's
// rows than over one row, so the logits agree to 1e-5, not bit for bit
// (SmolLM2's quantized GEMMs are row by row: engine_test's greedy outputs
// with and without speculation are equal token for token).
#include "runtime/cpu/executor/executor.h"
#include "test/source_root.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "runtime/backend/plan_kv_pool.h"

namespace kiln::cpu {
namespace {

const std::string kFixture = checkoutPath("test/fixtures/tiny-llama");

class VerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto manifest = Manifest::load(kFixture + "/artifact-spec");
    ASSERT_TRUE(manifest.ok()) << manifest.error().message;
    manifest_ = std::make_unique<Manifest>(manifest.take());
    WeightStoreOptions options{.source_path = kFixture, .check_source_stamp = false};
    auto weights = WeightStore::open(*manifest_, options);
    ASSERT_TRUE(weights.ok()) << weights.error().message;
    weights_ = std::make_unique<WeightStore>(weights.take());
    auto executor = CpuExecutor::create(*manifest_, *weights_, kvPoolConfigFor(*manifest_, 16), /*max_tokens=*/16);
    ASSERT_TRUE(executor.ok()) << executor.error().message;
    ex_ = executor.take();
    vocab_ = ex_->vocabSize();
  }

  // Runs `tokens` as one chunk after table's first `done` tokens; returns
  // the last token's logits.
  std::vector<float> forward(BlockTable& table, int64_t done, std::vector<int32_t> tokens) {
    const int64_t count = int64_t(tokens.size());
    EXPECT_TRUE(table.append(ex_->blockPool(), count).ok());
    std::vector<int32_t> positions, slots, qs{0, int32_t(count)}, kv{int32_t(done + count)};
    for (int64_t i = 0; i < count; ++i) {
      positions.push_back(int32_t(done + i));
      slots.push_back(int32_t(*table.slot(done + i)));
    }
    std::vector<int32_t> blocks(table.blocks().begin(), table.blocks().end());
    BatchInputs in{tokens, positions, slots, blocks, int(blocks.size()), qs, kv};
    std::vector<float> logits(static_cast<size_t>(vocab_));
    Status status = ex_->forward(in, logits);
    EXPECT_TRUE(status.ok()) << status.error().message;
    return logits;
  }

  struct Verified {
    std::vector<float> logits;  // [nodes, vocab]
    std::vector<int32_t> accepted;
    int32_t count = -1;
  };

  // One verify row: the tree after the table's first `done` tokens.
  Verified verify(BlockTable& table, int64_t done, const std::vector<int32_t>& tokens,
                  const std::vector<int32_t>& parents) {
    const int64_t nodes = int64_t(tokens.size());
    EXPECT_TRUE(table.append(ex_->blockPool(), nodes).ok());
    std::vector<int32_t> positions, slots, qs{0, int32_t(nodes)}, kv{int32_t(done + nodes)}, base{int32_t(done)};
    for (int64_t i = 0; i < nodes; ++i) {
      positions.push_back(parents[size_t(i)] < 0 ? int32_t(done) : positions[size_t(parents[size_t(i)])] + 1);
      slots.push_back(int32_t(*table.slot(done + i)));
    }
    std::vector<int32_t> blocks(table.blocks().begin(), table.blocks().end());
    BatchInputs in{tokens, positions, slots, blocks, int(blocks.size()), qs, kv};
    in.parents = parents;
    in.base_positions = base;
    Verified out;
    out.logits.resize(size_t(nodes * vocab_));
    out.accepted.resize(size_t(ex_->treeDepth() + 1));
    std::vector<int32_t> count(1);
    Status status = ex_->verify(in, out.logits, out.accepted, count);
    EXPECT_TRUE(status.ok()) << status.error().message;
    out.count = count[0];
    return out;
  }

  int32_t argmax(std::span<const float> row) {
    return int32_t(std::max_element(row.begin(), row.end()) - row.begin());
  }

  std::unique_ptr<Manifest> manifest_;
  std::unique_ptr<WeightStore> weights_;
  std::unique_ptr<CpuExecutor> ex_;
  int64_t vocab_ = 0;
};

const std::vector<int32_t> kPrompt = {1, 17, 42, 99, 5};

TEST_F(VerifyTest, PlanTreeIsTheCompiledOne) {
  EXPECT_EQ(ex_->treeNodes(), 11);
  EXPECT_EQ(ex_->treeDepth(), 3);
}

TEST_F(VerifyTest, EveryNodeMatchesDecodingItsPath) {
  BlockTable tree_table(manifest_->kv_cache.page_size);
  forward(tree_table, 0, {kPrompt.begin(), kPrompt.end() - 1});
  // Root 5 (the last prompt token, not yet run); widths 2,2,1 partly filled.
  const std::vector<int32_t> tokens = {5, 7, 70, 8, 80, 9, 11};
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2, 3};
  Verified v = verify(tree_table, int64_t(kPrompt.size()) - 1, tokens, parents);
  for (size_t node = 0; node < tokens.size(); ++node) {
    std::vector<int32_t> path;
    for (int32_t n = int32_t(node); n >= 0; n = parents[size_t(n)]) path.insert(path.begin(), tokens[size_t(n)]);
    BlockTable table(manifest_->kv_cache.page_size);
    std::vector<float> logits = forward(table, 0, {kPrompt.begin(), kPrompt.end() - 1});
    for (size_t i = 0; i < path.size(); ++i) logits = forward(table, int64_t(kPrompt.size()) - 1 + int64_t(i), {path[i]});
    std::span<const float> row(v.logits.data() + node * size_t(vocab_), size_t(vocab_));
    float worst = 0, scale = 1;
    for (int64_t i = 0; i < vocab_; ++i) {
      worst = std::max(worst, std::fabs(row[size_t(i)] - logits[size_t(i)]));
      scale = std::max(scale, std::fabs(logits[size_t(i)]));
    }
    EXPECT_LE(worst / scale, 1e-5f) << "node " << node;
    EXPECT_EQ(argmax(row), argmax(logits)) << "node " << node;
    table.release(ex_->blockPool());
  }
  tree_table.release(ex_->blockPool());
  EXPECT_EQ(ex_->blockPool().numFree(), ex_->blockPool().numBlocks());
}

TEST_F(VerifyTest, AcceptsTheLongestPathOfArgmaxes) {
  BlockTable table(manifest_->kv_cache.page_size);
  const int64_t done = int64_t(kPrompt.size()) - 1;
  forward(table, 0, {kPrompt.begin(), kPrompt.end() - 1});
  // First pass: the root's and a chain's argmaxes.
  Verified first = verify(table, done, {5, 0}, {-1, 0});
  const int32_t a1 = argmax({first.logits.data(), size_t(vocab_)});
  ASSERT_TRUE(table.truncate(ex_->blockPool(), done).ok());
  Verified second = verify(table, done, {5, (a1 + 1) % int32_t(vocab_), a1}, {-1, 0, 0});
  const int32_t a2 = argmax({second.logits.data() + 2 * vocab_, size_t(vocab_)});
  ASSERT_TRUE(table.truncate(ex_->blockPool(), done).ok());
  // The argmax child is the second sibling; under it a wrong token, then the
  // right one.
  Verified third = verify(table, done, {5, (a1 + 1) % int32_t(vocab_), a1, (a2 + 1) % int32_t(vocab_), a2},
                          {-1, 0, 0, 2, 2});
  EXPECT_GE(third.count, 2);
  EXPECT_EQ(third.accepted[0], 0);
  EXPECT_EQ(third.accepted[1], 2);
  EXPECT_EQ(third.accepted[2], 4);
  table.release(ex_->blockPool());
}

TEST_F(VerifyTest, BadTreesAreRefused) {
  BlockTable table(manifest_->kv_cache.page_size);
  forward(table, 0, {1, 2});
  ASSERT_TRUE(table.append(ex_->blockPool(), 3).ok());
  std::vector<int32_t> tokens{3, 4, 5}, positions{2, 3, 3}, slots{2, 3, 4}, qs{0, 3}, kv{5}, base{2};
  std::vector<int32_t> blocks(table.blocks().begin(), table.blocks().end());
  std::vector<int32_t> parents{-1, 0, 2};  // node 2 its own parent
  BatchInputs in{tokens, positions, slots, blocks, int(blocks.size()), qs, kv};
  in.parents = parents;
  in.base_positions = base;
  std::vector<float> logits(size_t(3 * vocab_));
  std::vector<int32_t> accepted(4), count(1);
  Status status = ex_->verify(in, logits, accepted, count);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().message,
            "verify: parents[2] = 2 (node 2 of sequence 0); expected an earlier node of the same tree");
  parents = {0, 0, 1};
  status = ex_->verify(in, logits, accepted, count);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().message, "verify: parents[0] = 0 (node 0 of sequence 0); expected -1 for the root");
  table.release(ex_->blockPool());
}

}  // namespace
}  // namespace kiln::cpu
