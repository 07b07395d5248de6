// The LayerSkip draft entry (kiln-compile --spec-layerskip 1) on the tiny
// random Llama of two layers (test/fixtures/tiny-llama/artifact-layerskip,
// tree widths:2,2,1): the draft writes each node's layer-0 keys and values
// exactly where and as the verify forward does, leaves layer 1's slots
// alone, and its logits differ from the full model's (one layer of two).
#include "runtime/cpu/executor/executor.h"
#include "test/source_root.h"

#include <gtest/gtest.h>

#include <cstring>

#include "runtime/backend/plan_kv_pool.h"

namespace kiln::cpu {
namespace {

const std::string kFixture = checkoutPath("test/fixtures/tiny-llama");

struct Opened {
  std::unique_ptr<Manifest> manifest;
  std::unique_ptr<WeightStore> weights;
  std::unique_ptr<CpuExecutor> ex;
};

Opened open(const std::string& folder) {
  Opened o;
  auto manifest = Manifest::load(kFixture + "/" + folder);
  EXPECT_TRUE(manifest.ok()) << manifest.error().message;
  if (!manifest.ok()) return o;
  o.manifest = std::make_unique<Manifest>(manifest.take());
  WeightStoreOptions options{.source_path = kFixture, .check_source_stamp = false};
  auto weights = WeightStore::open(*o.manifest, options);
  EXPECT_TRUE(weights.ok()) << weights.error().message;
  if (!weights.ok()) return o;
  o.weights = std::make_unique<WeightStore>(weights.take());
  auto ex = CpuExecutor::create(*o.manifest, *o.weights, kvPoolConfigFor(*o.manifest, 16), /*max_tokens=*/16);
  EXPECT_TRUE(ex.ok()) << ex.error().message;
  if (ex.ok()) o.ex = ex.take();
  return o;
}

// A tree of 4 nodes after 3 prompt tokens: root 0, children 1 and 2, 3 under 1.
struct Tree {
  std::vector<int32_t> tokens = {5, 17, 42, 9}, parents = {-1, 0, 0, 1};
  std::vector<int32_t> positions = {3, 4, 4, 5}, slots, blocks, qs = {0, 4}, kv = {7}, base = {3};
  BatchInputs inputs() const {
    BatchInputs in{tokens, positions, slots, blocks, int(blocks.size()), qs, kv};
    in.parents = parents;
    in.base_positions = base;
    return in;
  }
};

std::vector<float> slotRows(BlockPool& pool, int layer, bool keys, const std::vector<int32_t>& slots) {
  const KvPoolConfig& c = pool.config();
  const int64_t row = int64_t(c.kv_heads) * c.head_dim;
  const float* data = static_cast<const float*>(keys ? pool.keys(layer) : pool.values(layer));
  std::vector<float> out;
  for (int32_t s : slots) out.insert(out.end(), data + s * row, data + (s + 1) * row);
  return out;
}

TEST(DraftEntry, WritesTheVerifyForwardsLayerZeroKvAndNothingDeeper) {
  Opened o = open("artifact-layerskip");
  ASSERT_TRUE(o.ex);
  CpuExecutor& ex = *o.ex;
  ASSERT_EQ(ex.draftLayers(), 1);
  BlockPool& pool = ex.blockPool();
  BlockTable table(pool.config().page_size);
  ASSERT_TRUE(table.append(pool, 7).ok());
  // The prompt's 3 tokens, then the tree's 4 nodes at table positions 3..6.
  std::vector<int32_t> prompt = {1, 2, 3}, pslots = {int32_t(*table.slot(0)), int32_t(*table.slot(1)),
                                                     int32_t(*table.slot(2))};
  std::vector<int32_t> blocks(table.blocks().begin(), table.blocks().end());
  std::vector<int32_t> ppos = {0, 1, 2}, pqs = {0, 3}, pkv = {3};
  std::vector<float> prompt_logits(size_t(ex.vocabSize()));
  ASSERT_TRUE(ex.forward({prompt, ppos, pslots, blocks, int(blocks.size()), pqs, pkv}, prompt_logits).ok());

  Tree tree;
  tree.blocks = blocks;
  for (int64_t i = 0; i < 4; ++i) tree.slots.push_back(int32_t(*table.slot(3 + i)));
  const std::vector<float> layer1_before = slotRows(pool, 1, true, tree.slots);

  std::vector<float> draft_logits(size_t(4 * ex.vocabSize()));
  Status drafted = ex.draft(tree.inputs(), draft_logits);
  ASSERT_TRUE(drafted.ok()) << drafted.error().message;
  const std::vector<float> k0 = slotRows(pool, 0, true, tree.slots), v0 = slotRows(pool, 0, false, tree.slots);
  EXPECT_EQ(slotRows(pool, 1, true, tree.slots), layer1_before) << "the draft wrote layer 1's keys";

  std::vector<float> verify_logits(size_t(4 * ex.vocabSize()));
  std::vector<int32_t> accepted(size_t(ex.treeDepth() + 1)), count(1);
  ASSERT_TRUE(ex.verify(tree.inputs(), verify_logits, accepted, count).ok());
  EXPECT_EQ(slotRows(pool, 0, true, tree.slots), k0) << "verify's layer-0 keys differ from the draft's";
  EXPECT_EQ(slotRows(pool, 0, false, tree.slots), v0) << "verify's layer-0 values differ from the draft's";
  EXPECT_NE(slotRows(pool, 1, true, tree.slots), layer1_before) << "verify writes layer 1";
  EXPECT_NE(draft_logits, verify_logits);
}

TEST(DraftEntry, AbsentWithoutTheFlag) {
  Opened o = open("artifact-spec");
  ASSERT_TRUE(o.ex);
  EXPECT_EQ(o.ex->draftLayers(), 0);
  std::vector<float> logits(size_t(o.ex->vocabSize()));
  Tree tree;
  Status status = o.ex->draft(tree.inputs(), logits);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().message,
            "draft: the artifact has no draft entry (compile it with kiln-compile --spec-layerskip K)");
}

}  // namespace
}  // namespace kiln::cpu
