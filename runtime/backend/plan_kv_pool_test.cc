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

// An int8 or fp8 plan's pool: a byte a value and an f32 scale per (token,
// kv head), so a memory budget holds about twice the tokens of bf16.
TEST(PlanKvPool, ScaledPoolsHoldTwiceTheTokensOfBf16) {
  Manifest m = planWithKvCache();
  const int64_t budget = int64_t(1) << 30;
  const int64_t bf16_blocks = kvBlocksInBytes(kvPoolConfigFor(m, 1), budget);
  for (const char* type : {"int8", "fp8e4m3"}) {
    m.kv_cache.type = type;
    m.kv_cache.scales = "token_head";
    const KvPoolConfig kv = kvPoolConfigFor(m, 8);
    EXPECT_EQ(kvElementName(kv.element), type);
    EXPECT_TRUE(checkPoolMatchesManifest(kv, m).ok());
    // 2 pools x 2 layers x 16 slots x 4 heads x (64 codes + a 4-byte scale).
    EXPECT_EQ(kv.blockBytes(), 2 * 2 * 16 * 4 * (64 + 4));
    const int64_t blocks = kvBlocksInBytes(kv, budget);
    EXPECT_NEAR(double(blocks) / double(bf16_blocks), 128.0 / 68.0, 1e-3) << type;
  }
}

TEST(PlanKvPool, AnotherTypeIsRefused) {
  Manifest m = planWithKvCache();
  KvPoolConfig kv = kvPoolConfigFor(m, 8);
  kv.element = KvElement::kInt8;
  Status s = checkPoolMatchesManifest(kv, m);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "kv pool type int8 does not match artifact/manifest.json: kv_cache.type bf16");
  m.kv_cache.type = "int8";
  s = checkPoolMatchesManifest(kv, m);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message,
            "kv pool type int8 has scales, but artifact/manifest.json: kv_cache.scales is ''");
}

}  // namespace
}  // namespace kiln
