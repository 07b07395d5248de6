// What the CUDA executor does on any machine: its errors before any GPU work
// (a missing driver) are clear; with a GPU, the tiny-llama fixture runs as a
// bf16 plan, its greedy ids are the argmax of its logits, and running out of
// GPU memory says what was asked. Its agreement with the CPU executor is
// test/gpu/cuda_vs_cpu_executor_test; the full check against transformers is
// test/gpu/hf_logits_gpu_test (GPU machine).
#include "runtime/cuda/executor/executor.h"
#include "test/source_root.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

#include "runtime/backend/plan_kv_pool.h"
#include "runtime/cuda/executor/bf16_fixture_plan.h"
#include "runtime/cuda/executor/launch_shape.h"

namespace kiln::cuda {
namespace {

const std::string kFixture = checkoutPath("test/fixtures/tiny-llama");

TEST(CudaExecutor, RunsTheFixtureOrSaysWhatIsMissing) {
  auto manifest = testing::bf16Plan(kFixture);
  ASSERT_TRUE(manifest.ok()) << "the fixture does not convert to a bf16 plan: "
                             << manifest.error().message;
  auto weights = WeightStore::open(*manifest, {.source_path = kFixture, .check_source_stamp = false});
  ASSERT_TRUE(weights.ok()) << "fixture weights do not bind as bf16 plan weights: "
                            << weights.error().message;
  auto ex = CudaExecutor::create(*manifest, *weights, kvPoolConfigFor(*manifest, 8), 16,
                                 {.progress = false});
  if (!ex.ok()) {
    // No GPU here: the error names what is missing, and nothing crashed.
    // The half below runs on the GPU machine (scripts/gpu-check.sh).
    EXPECT_NE(ex.error().message.find("no CUDA backend"), std::string::npos) << ex.error().message;
    std::printf("no GPU: checked the error (%s); the fixture run needs the GPU machine\n",
                ex.error().message.substr(0, ex.error().message.find('\n')).c_str());
    return;
  }
  // A GPU: one 5-token prefill, finite logits.
  std::vector<int32_t> tokens{1, 2, 3, 4, 5}, positions{0, 1, 2, 3, 4}, slots{0, 1, 2, 3, 4};
  std::vector<int32_t> tables{0}, query_start{0, 5}, kv_lens{5};
  BatchInputs in{tokens, positions, slots, tables, 1, query_start, kv_lens};
  std::vector<float> logits(size_t((*ex)->vocabSize()));
  Status s = (*ex)->forward(in, logits);
  ASSERT_TRUE(s.ok()) << s.error().message;
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  // A bad batch fails before anything runs.
  std::vector<int32_t> bad_slots{0, 1, 2, 3, 1 << 20};
  BatchInputs bad{tokens, positions, bad_slots, tables, 1, query_start, kv_lens};
  EXPECT_FALSE((*ex)->forward(bad, logits).ok());

  // Greedy on the GPU: the same token as the host's argmax of the logits
  // (largest, lowest id on ties), for the prefill (steps launched one by
  // one) and for decode steps (graph replay) of two sequences.
  auto hostArgmax = [&](const float* row) {
    int best = 0;
    for (int i = 1; i < int((*ex)->vocabSize()); ++i)
      if (row[i] > row[best]) best = i;
    return best;
  };
  std::vector<int32_t> greedy(1, -1);
  s = (*ex)->forwardGreedy(in, greedy);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(greedy[0], hostArgmax(logits.data()));
  std::vector<int32_t> none;
  EXPECT_FALSE((*ex)->forwardGreedy(in, none).ok()) << "tokens_out too small";
  // Sequence 0 goes on from the prefill; sequence 1 (block 1) decodes from
  // an empty cache at position 0.
  const int64_t vocab = (*ex)->vocabSize();
  std::vector<float> decode_logits(size_t(2 * vocab));
  for (int step = 0; step < 4; ++step) {
    std::vector<int32_t> dt{greedy[0], 7}, dp{5 + step, step}, ds{5 + step, 16 + step};
    std::vector<int32_t> dtables{0, 1}, dq{0, 1, 2}, dkv{6 + step, 1 + step};
    BatchInputs decode{dt, dp, ds, dtables, 1, dq, dkv};
    // The logits path first (it writes the same KV slots the greedy run rewrites).
    ASSERT_TRUE((*ex)->forward(decode, decode_logits).ok());
    std::vector<int32_t> two(2, -1);
    s = (*ex)->forwardGreedy(decode, two);
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(two[0], hostArgmax(decode_logits.data())) << "step " << step;
    EXPECT_EQ(two[1], hostArgmax(decode_logits.data() + vocab)) << "step " << step;
    greedy[0] = two[0];
  }
}

// Out of GPU memory, two ways: KV pools larger than the card, and a
// --gpu-memory-fraction too small to leave a KV pool. Each error says what
// was asked and what was there; the failed executors free what they had
// allocated (the host keeps no copy of the pools), so a normal one still
// opens and runs after them.
TEST(CudaExecutor, OutOfMemorySaysWhatWasAskedAndWhatWasFree) {
  auto manifest = testing::bf16Plan(kFixture);
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  auto weights = WeightStore::open(*manifest, {.source_path = kFixture, .check_source_stamp = false});
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  const KvPoolConfig kv = kvPoolConfigFor(*manifest, 8);
  // Blocks for 4 TiB of bf16 K and V (or as many as the i32 slot ids allow).
  KvPoolConfig huge_kv = kv;
  const int64_t block_bytes = int64_t(2) * kv.layers * kv.page_size * kv.kv_heads * kv.head_dim * 2;
  huge_kv.num_blocks = std::min<int64_t>((int64_t(4) << 40) / block_bytes, INT32_MAX / kv.page_size);
  ASSERT_GT(huge_kv.num_blocks * block_bytes, int64_t(1) << 38) << "the fixture's blocks are too small";
  auto huge = CudaExecutor::create(*manifest, *weights, huge_kv, 16, {.progress = false});
  ASSERT_FALSE(huge.ok()) << "KV pools of " << huge_kv.num_blocks * block_bytes << " bytes fit on this GPU";
  if (huge.error().message.find("no CUDA backend") != std::string::npos)
    GTEST_SKIP() << "no GPU here (" << huge.error().message.substr(0, huge.error().message.find('\n'))
                 << "); this test runs on the GPU machine (scripts/gpu-check.sh)";
  const std::string& pools = huge.error().message;
  EXPECT_NE(pools.find("cannot allocate the KV cache pools on the GPU: asked "), std::string::npos) << pools;
  EXPECT_NE(pools.find(" MiB free of "), std::string::npos) << pools;

  auto starved = CudaExecutor::create(*manifest, *weights, kv, 16,
                                      {.progress = false, .gpu_memory_fraction = 1e-6});
  ASSERT_FALSE(starved.ok()) << "a KV pool fit in a millionth of the GPU's memory";
  const std::string& fraction = starved.error().message;
  EXPECT_NE(fraction.find("--gpu-memory-fraction 1e-06"), std::string::npos) << fraction;
  EXPECT_NE(fraction.find("GiB"), std::string::npos) << fraction;

  for (int attempt = 0; attempt < 3; ++attempt) {  // repeated failures leave nothing behind
    auto again = CudaExecutor::create(*manifest, *weights, huge_kv, 16, {.progress = false});
    ASSERT_FALSE(again.ok());
  }
  auto ex = CudaExecutor::create(*manifest, *weights, kv, 16, {.progress = false});
  ASSERT_TRUE(ex.ok()) << "after the failures: " << ex.error().message;
  std::vector<int32_t> tokens{1, 2, 3}, positions{0, 1, 2}, slots{0, 1, 2}, tables{0}, query_start{0, 3},
      kv_lens{3};
  BatchInputs in{tokens, positions, slots, tables, 1, query_start, kv_lens};
  std::vector<float> logits(size_t((*ex)->vocabSize()));
  ASSERT_TRUE((*ex)->forward(in, logits).ok());
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(LaunchShape, DecodeSplitsFillTheGpuWithoutShortPartitions) {
  const int sms = 132, kv_heads = 8;
  // Tiny contexts keep the unsplit kernel.
  EXPECT_EQ(decodeSplits(1, kv_heads, 1, sms), 0);
  EXPECT_EQ(decodeSplits(1, kv_heads, 64, sms), 0);
  // Batch 1 at 8k keys: 8 (token, kv head) pairs want about 2 * 132 / 8 = 33
  // partitions; the power of two below is 32.
  EXPECT_EQ(decodeSplits(1, kv_heads, 8192, sms), 32);
  // Up to kOneSplitKeys (256) keys take one partition; past that a
  // partition holds at least kMinSplitKeys (128): 1000 allow 7, rounded
  // down to 4.
  EXPECT_EQ(decodeSplits(1, kv_heads, 200, sms), 1);
  EXPECT_EQ(decodeSplits(1, kv_heads, 256, sms), 1);
  EXPECT_EQ(decodeSplits(1, kv_heads, 1000, sms), 4);
  EXPECT_EQ(decodeSplits(1, kv_heads, 1024, sms), 8);
  // Batch 32 already gives 256 blocks: one partition each.
  EXPECT_EQ(decodeSplits(32, kv_heads, 8192, sms), 1);
  for (int64_t b : {1, 2, 3, 7, 16, 64, 300})
    for (int keys : {65, 100, 128, 1000, 4096, 32768, 131072}) {
      const int s = decodeSplits(b, kv_heads, keys, sms);
      ASSERT_GE(s, 1) << b << " " << keys;
      EXPECT_EQ(s & (s - 1), 0) << "a power of two: " << s;
      EXPECT_LE(s, kMaxSplits);
      if (s > 1) {
        EXPECT_GE(keys / s, kMinSplitKeys) << "partitions of at least kMinSplitKeys keys";
        EXPECT_LE(b * kv_heads * s, 2 * sms) << "about two blocks per SM at most";
      }
    }
}

TEST(LaunchShape, GraphStrideChangesOnlyWhenTheTableDoubles) {
  EXPECT_EQ(graphStride(1, 1000), 16);
  EXPECT_EQ(graphStride(16, 1000), 16);
  EXPECT_EQ(graphStride(17, 1000), 32);
  EXPECT_EQ(graphStride(32, 1000), 32);
  EXPECT_EQ(graphStride(33, 1000), 64);
  // Never past what a sequence can hold (the pool), never below the batch's own.
  EXPECT_EQ(graphStride(20, 24), 24);
  EXPECT_EQ(graphStride(5, 3), 5);
  for (int blocks = 1; blocks < 5000; blocks += 37) EXPECT_GE(graphStride(blocks, 4096), blocks);
}

}  // namespace
}  // namespace kiln::cuda
