#include "runtime/cpu/kernels/paged_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "runtime/numerics/testing.h"

namespace kiln::cpu {
namespace {

TEST(AppendKvPagedTest, WritesExactlyTheMappedSlots) {
  std::mt19937 rng(60);
  for (int trial = 0; trial < 10; ++trial) {
    KvPoolShape pool{testing::randomInt(rng, 1, 6), testing::randomInt(rng, 1, 17),
                     testing::randomInt(rng, 1, 4), testing::randomInt(rng, 1, 70)};
    const int64_t elems = pool.slotElems();
    const int64_t tokens = testing::randomInt(rng, 1, int(pool.slots()));
    std::vector<int64_t> all_slots(size_t(pool.slots()));
    std::iota(all_slots.begin(), all_slots.end(), 0);
    std::shuffle(all_slots.begin(), all_slots.end(), rng);
    std::vector<int64_t> slots(all_slots.begin(), all_slots.begin() + tokens);
    if (tokens > 1) slots[1] = -1;  // padding token: skipped
    std::vector<float> k = testing::randomFloats(rng, size_t(tokens * elems));
    std::vector<float> v = testing::randomFloats(rng, size_t(tokens * elems));
    std::vector<float> k_pool = testing::poisoned(size_t(pool.slots() * elems));
    std::vector<float> v_pool = testing::poisoned(size_t(pool.slots() * elems));
    Status s = appendKvPaged(k.data(), v.data(), tokens, slots.data(), pool, k_pool.data(), v_pool.data());
    ASSERT_TRUE(s.ok()) << s.error().message;

    std::vector<int64_t> owner(size_t(pool.slots()), -1);
    for (int64_t t = 0; t < tokens; ++t)
      if (slots[size_t(t)] >= 0) owner[size_t(slots[size_t(t)])] = t;
    for (int64_t slot = 0; slot < pool.slots(); ++slot) {
      // slot = block * page_size + offset -> element [block][offset][head][dim]
      const int64_t block = slot / pool.page_size, offset = slot % pool.page_size;
      for (int64_t e = 0; e < elems; ++e) {
        const size_t at = size_t(((block * pool.page_size) + offset) * elems + e);
        const int64_t t = owner[size_t(slot)];
        if (t < 0) {
          ASSERT_TRUE(std::isnan(k_pool[at]) && std::isnan(v_pool[at])) << "slot " << slot << " touched";
        } else {
          ASSERT_EQ(k_pool[at], k[size_t(t * elems + e)]);
          ASSERT_EQ(v_pool[at], v[size_t(t * elems + e)]);
        }
      }
    }
  }
}

TEST(AppendKvPagedTest, OutOfRangeSlotIsAnErrorAndWritesNothing) {
  KvPoolShape pool{2, 4, 1, 2};
  std::vector<float> k(4, 1.0f), v(4, 1.0f);
  std::vector<float> k_pool = testing::poisoned(16), v_pool = testing::poisoned(16);
  const int64_t slots[2] = {0, 8};
  Status s = appendKvPaged(k.data(), v.data(), 2, slots, pool, k_pool.data(), v_pool.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("slot 8 of token 1"), std::string::npos) << s.error().message;
  EXPECT_TRUE(std::isnan(k_pool[0]));
}

}  // namespace
}  // namespace kiln::cpu
