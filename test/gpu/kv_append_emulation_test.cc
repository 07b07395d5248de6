// The hybrid stacks' kv_append kernel (codegen/kernels/kv_append.cuh) on the
// emulated device of cuda_emulation.h, no GPU: five tokens' keys and values
// into a pool of 3 blocks of 4 slots ([num_blocks, page_size, Hkv, D]), in
// slots out of order across blocks, one token with slot -1 (no KV write)
// and one past the pool; every written row equals the token's, unrotated
// (f32, and rounded once into a bf16 pool), every other slot keeps its NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test/gpu/cuda_emulation.h"

#include "codegen/kernels/kv_append.cuh"

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;

constexpr int kKvHeads = 2, kHeadDim = 8, kRow = kKvHeads * kHeadDim, kPage = 4, kBlocks = 3;
constexpr int kSlots = kBlocks * kPage;

template <class Pool>
struct AppendConfig {
  using X = float;
  using Kv = Pool;
  static constexpr int kRow = gpu_test::kRow, kThreads = 32;
};

float valueOf(float v) { return v; }
float valueOf(kk::bf16 v) { return fromBf16(v.bits); }

template <class Kv>
void expectAppended() {
  const std::vector<int> slot_mapping{9, 2, -1, 5, kSlots + 3};
  const int tokens = int(slot_mapping.size());
  std::vector<float> k(size_t(tokens * kRow)), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = 0.37f * float(i) - 3.1f;
    v[i] = 1.0f / (1.0f + float(i));
  }
  std::vector<Kv> k_pool(size_t(kSlots * kRow), kk::from_float<Kv>(NAN)), v_pool(k_pool);
  kk::KvAppendParams p{k.data(), v.data(), slot_mapping.data(), k_pool.data(), v_pool.data(), tokens, kSlots};
  emu::launch({unsigned(tokens), 1, 1}, 32, [&p] { kk::kv_append<AppendConfig<Kv>>(p); });
  ASSERT_TRUE(emu::failure.empty()) << emu::failure;
  std::vector<int> writer(kSlots, -1);  // the token each slot holds
  for (int t = 0; t < tokens; ++t)
    if (slot_mapping[size_t(t)] >= 0 && slot_mapping[size_t(t)] < kSlots) writer[size_t(slot_mapping[size_t(t)])] = t;
  for (int slot = 0; slot < kSlots; ++slot)
    for (int i = 0; i < kRow; ++i) {
      // [block, offset, head, d]: slot = block · page_size + offset, a row of Hkv · D.
      const size_t at = size_t((slot / kPage) * kPage + slot % kPage) * kRow + size_t(i);
      const float got_k = valueOf(k_pool[at]), got_v = valueOf(v_pool[at]);
      const int t = writer[size_t(slot)];
      if (t < 0) {
        EXPECT_TRUE(std::isnan(got_k) && std::isnan(got_v)) << "slot " << slot << " was written";
        continue;
      }
      const size_t from = size_t(t * kRow + i);
      EXPECT_EQ(got_k, valueOf(kk::from_float<Kv>(k[from]))) << "slot " << slot << " element " << i;
      EXPECT_EQ(got_v, valueOf(kk::from_float<Kv>(v[from]))) << "slot " << slot << " element " << i;
    }
}

TEST(KvAppend, WritesEachTokensRowIntoItsSlotF32) { expectAppended<float>(); }
TEST(KvAppend, WritesEachTokensRowIntoItsSlotBf16) { expectAppended<kk::bf16>(); }

}  // namespace
}  // namespace kiln::gpu_test
