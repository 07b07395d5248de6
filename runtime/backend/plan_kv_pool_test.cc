// The KV pool a plan asks for: its kv_cache shape with the caller's block
// count, and a pool of another shape refused with both shapes in the error.
#include "runtime/backend/plan_kv_pool.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

Manifest planWithKvCache() {
  Manifest m;
  m.path = "artifact/manifest.json";
  m.kv_cache = {.layers = 2, .page_size = 16, .kv_heads = 4, .head_dim = 64, .type = "bf16"};
  return m;
}

TEST(PlanKvPool, HasThePlansShapeAndTheCallersBlocks) {
  const KvPoolConfig kv = kvPoolConfigFor(planWithKvCache(), 40);
  EXPECT_EQ(kv.layers, 2);
  EXPECT_EQ(kv.num_blocks, 40);
  EXPECT_EQ(kv.page_size, 16);
  EXPECT_EQ(kv.kv_heads, 4);
  EXPECT_EQ(kv.head_dim, 64);
  EXPECT_TRUE(checkPoolMatchesManifest(kv, planWithKvCache()).ok());
}

TEST(PlanKvPool, AnotherShapeIsRefusedWithBoth) {
  KvPoolConfig kv = kvPoolConfigFor(planWithKvCache(), 8);
  kv.kv_heads = 8;
  const Status s = checkPoolMatchesManifest(kv, planWithKvCache());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message,
            "kv pool config (layers 2, page_size 16, kv_heads 8, head_dim 64) does not match "
            "artifact/manifest.json: kv_cache (layers 2, page_size 16, kv_heads 4, head_dim 64)");
}

}  // namespace
}  // namespace kiln
