#include "runtime/kv/state_pool.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

// tiny-mamba2's shape: 2 layers, conv [3, 192], state 8·16·16.
StatePoolConfig tinyMamba2(int64_t slots) {
  return StatePoolConfig{{{3, 192, 2048}, {3, 192, 2048}}, slots, 4};
}

TEST(StatePool, SlotBytesAndAccounting) {
  StatePoolConfig c = tinyMamba2(4);
  EXPECT_EQ(c.slotBytes(), 2 * (3 * 192 * 4 + 2048 * 4));
  EXPECT_EQ(stateSlotsInBytes(c, 10 * c.slotBytes() + 5), 10);
  c.conv_element_bytes = 2;  // bf16 conv inputs, f32 state
  EXPECT_EQ(c.slotBytes(), 2 * (3 * 192 * 2 + 2048 * 4));
  auto pool = StatePool::create(tinyMamba2(4), false);
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ(pool->bytes(), 4 * tinyMamba2(4).slotBytes());
  EXPECT_EQ(pool->conv(0, 0), nullptr);
}

TEST(StatePool, AcquireZeroesAndReleaseReturns) {
  auto pool = StatePool::create(tinyMamba2(2), true);
  ASSERT_TRUE(pool.ok());
  auto a = pool->acquire();
  ASSERT_TRUE(a.ok());
  pool->conv(1, *a)[5] = 3.0f;
  pool->ssm(0, *a)[2047] = 7.0f;
  auto b = pool->acquire();
  ASSERT_TRUE(b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_FALSE(pool->acquire().ok());  // both held
  EXPECT_EQ(pool->numFree(), 0);
  ASSERT_TRUE(pool->release(*a).ok());
  EXPECT_FALSE(pool->release(*a).ok());  // not held twice
  auto again = pool->acquire();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *a);
  EXPECT_EQ(pool->conv(1, *again)[5], 0.0f);  // a new sequence never sees the old state
  EXPECT_EQ(pool->ssm(0, *again)[2047], 0.0f);
}

TEST(StatePool, RefusesBadShapes) {
  EXPECT_FALSE(StatePool::create(tinyMamba2(0), false).ok());
  StatePoolConfig c = tinyMamba2(2);
  c.layers[1].ssm_elements = 0;
  EXPECT_FALSE(StatePool::create(c, false).ok());
  EXPECT_FALSE(StatePool::create(tinyMamba2(2), false)->release(1).ok());
}

}  // namespace
}  // namespace kiln
