#include "runtime/cpu/kernels/paged_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

#include "runtime/kv/kv_quant.h"
#include "runtime/numerics/quant.h"
#include "runtime/numerics/testing.h"

namespace kiln::cpu {
namespace {

// f16 and bf16 pools hold each value rounded to nearest: within half an
// ulp of the pool's type (2^-11 relative for f16, 2^-8 for bf16); slots no
// token maps stay as they were.
TEST(AppendKvPagedTest, HalfPrecisionPoolsRoundToNearest) {
  std::mt19937 rng(61);
  for (KvElement element : {KvElement::kF16, KvElement::kBf16}) {
    KvPoolShape pool{3, 4, 2, 24, element};
    const int64_t elems = pool.slotElems(), tokens = 5;
    const std::vector<int64_t> slots{7, -1, 0, 11, 3};
    std::vector<float> k = testing::randomFloats(rng, size_t(tokens * elems), -30.0f, 30.0f);
    std::vector<float> v = testing::randomFloats(rng, size_t(tokens * elems), -30.0f, 30.0f);
    std::vector<uint16_t> k_pool(size_t(pool.slots() * elems), 0xabcd), v_pool(k_pool);
    ASSERT_TRUE(appendKvPaged(k.data(), v.data(), tokens, slots.data(), pool, k_pool.data(), v_pool.data()).ok());
    const double ulp = element == KvElement::kF16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
    auto widen = [&](uint16_t bits) { return element == KvElement::kF16 ? f16ToF32(bits) : bf16ToF32(bits); };
    std::vector<bool> written(size_t(pool.slots()), false);
    for (int64_t t = 0; t < tokens; ++t) {
      if (slots[size_t(t)] < 0) continue;
      written[size_t(slots[size_t(t)])] = true;
      for (int64_t e = 0; e < elems; ++e) {
        const size_t at = size_t(slots[size_t(t)] * elems + e);
        const double x = k[size_t(t * elems + e)], y = v[size_t(t * elems + e)];
        ASSERT_LE(std::fabs(widen(k_pool[at]) - x), 0.5 * ulp * std::fabs(x) + 1e-7);
        ASSERT_LE(std::fabs(widen(v_pool[at]) - y), 0.5 * ulp * std::fabs(y) + 1e-7);
      }
    }
    for (int64_t slot = 0; slot < pool.slots(); ++slot)
      if (!written[size_t(slot)])
        for (int64_t e = 0; e < elems; ++e) ASSERT_EQ(k_pool[size_t(slot * elems + e)], 0xabcd);
  }
}

// int8 and fp8 pools: each (token, kv head) row gets the scale absmax / qmax
// (checked in float64), its values decode within half a quantization step,
// an all-zero head decodes to zeros, and slots no token maps keep their
// bytes and scales.
TEST(AppendKvPagedTest, ScaledPoolsQuantizeEachTokenAndHead) {
  std::mt19937 rng(62);
  for (KvElement element : {KvElement::kInt8, KvElement::kFp8E4M3}) {
    KvPoolShape pool{3, 4, 3, 40, element};
    const int64_t elems = pool.slotElems(), tokens = 5, d = pool.head_dim;
    const std::vector<int64_t> slots{7, -1, 0, 11, 3};
    std::vector<float> k = testing::randomFloats(rng, size_t(tokens * elems), -30.0f, 30.0f);
    std::vector<float> v = testing::randomFloats(rng, size_t(tokens * elems), -0.01f, 0.01f);
    std::fill_n(k.begin() + 3 * elems + d, d, 0.0f);  // token 3, head 1: all zero
    std::vector<uint8_t> k_pool(size_t(pool.slots() * elems), 0xee), v_pool(k_pool);
    std::vector<float> k_scales(size_t(pool.slots() * pool.kv_heads), -1.0f), v_scales(k_scales);
    Status s = appendKvPaged(k.data(), v.data(), tokens, slots.data(), pool, k_pool.data(), v_pool.data(),
                             k_scales.data(), v_scales.data());
    ASSERT_TRUE(s.ok()) << s.error().message;
    const double qmax = element == KvElement::kInt8 ? 127.0 : 448.0;
    std::vector<bool> written(size_t(pool.slots()), false);
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t slot = slots[size_t(t)];
      if (slot < 0) continue;
      written[size_t(slot)] = true;
      for (int h = 0; h < pool.kv_heads; ++h)
        for (auto [x, codes, scales] : {std::tuple{&k, &k_pool, &k_scales}, std::tuple{&v, &v_pool, &v_scales}}) {
          const float* row = x->data() + t * elems + h * d;
          double absmax = 0;
          for (int64_t e = 0; e < d; ++e) absmax = std::max(absmax, std::fabs(double(row[e])));
          const float scale = (*scales)[size_t(kvScaleIndex(slot, h, pool.page_size, pool.kv_heads))];
          ASSERT_NEAR(scale, absmax / qmax, 1e-6 * absmax / qmax) << "token " << t << " head " << h;
          std::vector<float> back(static_cast<size_t>(d));
          dequantizeKvRow(codes->data() + slot * elems + h * d, scale, d, element, back.data());
          for (int64_t e = 0; e < d; ++e) {
            // Half a step: scale / 2 for int8; for e4m3 1/16 of the value, or
            // 2^-10 scale among the subnormals.
            const double half_step = element == KvElement::kInt8
                                         ? 0.5 * scale
                                         : std::max(std::fabs(double(row[e])) / 16, std::ldexp(double(scale), -10));
            ASSERT_LE(std::fabs(back[size_t(e)] - row[e]), half_step * (1 + 1e-6)) << "token " << t << " head " << h;
          }
          if (absmax == 0)
            for (int64_t e = 0; e < d; ++e) ASSERT_EQ(back[size_t(e)], 0.0f);
        }
    }
    EXPECT_EQ(k_scales[size_t(kvScaleIndex(11, 1, pool.page_size, pool.kv_heads))], 0.0f);  // the all-zero head
    for (int64_t slot = 0; slot < pool.slots(); ++slot)
      if (!written[size_t(slot)]) {
        for (int64_t e = 0; e < elems; ++e) ASSERT_EQ(k_pool[size_t(slot * elems + e)], 0xee);
        for (int h = 0; h < pool.kv_heads; ++h)
          ASSERT_EQ(v_scales[size_t(kvScaleIndex(slot, h, pool.page_size, pool.kv_heads))], -1.0f);
      }
  }
}

TEST(AppendKvPagedTest, ScalesMustMatchThePool) {
  std::vector<float> k(4, 1.0f), v(4, 1.0f), scales(8, 0.0f);
  std::vector<uint8_t> codes(16);
  const int64_t slots[2] = {0, 1};
  Status s = appendKvPaged(k.data(), v.data(), 2, slots, KvPoolShape{2, 4, 1, 2, KvElement::kFp8E4M3}, codes.data(),
                           codes.data(), scales.data(), nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message,
            "append_kv_paged: fp8e4m3 pools need their K and V scales ([num_blocks, kv_heads, page_size] f32)");
  std::vector<float> pool(16);
  s = appendKvPaged(k.data(), v.data(), 2, slots, KvPoolShape{2, 4, 1, 2}, pool.data(), pool.data(), scales.data(),
                    scales.data());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, "append_kv_paged: f32 pools have no scales, but scales were given");
}

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
