// What the CUDA executor does on any machine: its errors before any GPU work
// (a missing driver) are clear; with a GPU, the tiny-llama fixture runs, as
// a bf16 plan and as its own f32 one, which agrees with the CPU executor. The full
// check against transformers is test/gpu/hf_logits_gpu_test (GPU machine).
#include "runtime/cuda/executor/executor.h"
#include "runtime/cpu/executor/executor.h"
#include "runtime/cuda/executor/launch_shape.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace kiln::cuda {
namespace {

const std::string kFixture = KILN_TINY_LLAMA_DIR;

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The fixture's f32 plan with every activation and the KV cache in bf16
// (rows half as wide in bytes, the planned offsets kept); weights stay f32.
Result<Manifest> bf16Plan() {
  auto j = nlohmann::json::parse(readFile(kFixture + "/artifact/manifest.json"), nullptr, false);
  if (j.is_discarded()) return makeError("fixture manifest is not JSON");
  j["activation_type"] = "bf16";
  j["kv_cache"]["type"] = "bf16";
  for (auto& [name, entry] : j["entries"].items()) {
    for (auto& v : entry["values"]) {
      v["type"] = "bf16";
      v["row_bytes"] = v["row_bytes"].get<int64_t>() / 2;
    }
    for (auto& step : entry["steps"])
      if (step["params"].contains("kv_type")) step["params"]["kv_type"] = "bf16";
  }
  return Manifest::parse(j.dump(), kFixture + "/artifact/manifest.json");
}

// ||got - want|| / ||want|| over the whole vector.
double relativeL2(std::span<const float> got, std::span<const float> want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff / norm);
}

// The fixture's own plan, f32 (vLLM's --dtype float32): past the type
// checks, and with a GPU its logits are the CPU executor's on the same
// artifact to f32 rounding, through the CUDA-core attention (prefill, and
// decode split over 4 key partitions with the combine), cuBLASLt f32 GEMMs
// at every row count, and the argmax over f32 logits.
TEST(CudaExecutor, RunsTheF32FixtureAsTheCpuExecutorDoes) {
  auto manifest = Manifest::load(kFixture + "/artifact");
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  ASSERT_EQ(manifest->activation_type, "f32");
  auto weights = WeightStore::open(*manifest, {.source_path = kFixture, .check_source_stamp = false});
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  const KvPoolConfig kv = cpu::kvPoolConfigFor(*manifest, 64);
  constexpr int64_t kMaxTokens = 640;
  auto ex = CudaExecutor::create(*manifest, *weights, kv, kMaxTokens, {.progress = false});
  if (!ex.ok()) {
    EXPECT_NE(ex.error().message.find("no CUDA backend"), std::string::npos) << ex.error().message;
    std::printf("no GPU: checked the error (%s); the f32 run needs the GPU machine\n",
                ex.error().message.substr(0, ex.error().message.find('\n')).c_str());
    return;
  }
  auto cpu_ex = cpu::CpuExecutor::create(*manifest, *weights, kv, kMaxTokens);
  ASSERT_TRUE(cpu_ex.ok()) << cpu_ex.error().message;
  const int64_t vocab = (*ex)->vocabSize();
  ASSERT_EQ(vocab, (*cpu_ex)->vocabSize());
  constexpr double kTolerance = 1e-4;

  // Prefill: sequence 0 a 600-token prompt in blocks 0..37, sequence 1 five
  // tokens in block 40.
  std::vector<int32_t> tokens, positions, slots;
  for (int i = 0; i < 600; ++i) {
    tokens.push_back((i * 37 + 11) % int(vocab));
    positions.push_back(i);
    slots.push_back(i);
  }
  for (int i = 0; i < 5; ++i) {
    tokens.push_back((i * 5 + 3) % int(vocab));
    positions.push_back(i);
    slots.push_back(40 * 16 + i);
  }
  std::vector<int32_t> tables(2 * 40, 0), query_start{0, 600, 605}, kv_lens{600, 5};
  for (int b = 0; b < 38; ++b) tables[size_t(b)] = b;
  tables[40] = 40;
  cpu::BatchInputs prefill{tokens, positions, slots, tables, 40, query_start, kv_lens};
  std::vector<float> gpu(size_t(2 * vocab)), cpu(size_t(2 * vocab));
  Status s = (*ex)->forward(prefill, gpu);
  ASSERT_TRUE(s.ok()) << s.error().message;
  s = (*cpu_ex)->forward(prefill, cpu);
  ASSERT_TRUE(s.ok()) << s.error().message;
  const double prefill_error = relativeL2(gpu, cpu);
  EXPECT_LE(prefill_error, kTolerance) << "prefill";

  // Decode both (graph replays; 601+ keys split 4 ways), the next token the
  // GPU's greedy pick, which must be the argmax of its logits.
  auto hostArgmax = [&](const float* row) {
    return int32_t(std::max_element(row, row + vocab) - row);
  };
  std::vector<int32_t> next{hostArgmax(gpu.data()), hostArgmax(gpu.data() + vocab)};
  double decode_error = 0;
  for (int step = 0; step < 4; ++step) {
    std::vector<int32_t> dp{600 + step, 5 + step}, ds{600 + step, 40 * 16 + 5 + step};
    std::vector<int32_t> dq{0, 1, 2}, dkv{601 + step, 6 + step};
    cpu::BatchInputs decode{next, dp, ds, tables, 40, dq, dkv};
    ASSERT_TRUE((*ex)->forward(decode, gpu).ok());
    ASSERT_TRUE((*cpu_ex)->forward(decode, cpu).ok());
    decode_error = std::max(decode_error, relativeL2(gpu, cpu));
    EXPECT_LE(relativeL2(gpu, cpu), kTolerance) << "decode step " << step;
    std::vector<int32_t> greedy(2, -1);
    s = (*ex)->forwardGreedy(decode, greedy);
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(greedy[0], hostArgmax(gpu.data())) << "step " << step;
    EXPECT_EQ(greedy[1], hostArgmax(gpu.data() + vocab)) << "step " << step;
    next = greedy;
  }

  // A second prefill of another row count (525, after 605 and the decode
  // steps): new GEMM plans beside the cached ones. Sequence 0 starts over
  // with 520 tokens in its blocks; sequence 1's five are written again.
  tokens.erase(tokens.begin() + 520, tokens.begin() + 600);
  positions.erase(positions.begin() + 520, positions.begin() + 600);
  slots.erase(slots.begin() + 520, slots.begin() + 600);
  std::vector<int32_t> query_start2{0, 520, 525}, kv_lens2{520, 5};
  cpu::BatchInputs prefill2{tokens, positions, slots, tables, 40, query_start2, kv_lens2};
  ASSERT_TRUE((*ex)->forward(prefill2, gpu).ok());
  ASSERT_TRUE((*cpu_ex)->forward(prefill2, cpu).ok());
  const double second_prefill_error = relativeL2(gpu, cpu);
  EXPECT_LE(second_prefill_error, kTolerance) << "second prefill";
  std::printf("f32 plan: CUDA vs CPU executor logits, relative L2 %.3g (prefill), %.3g (worst decode step), "
              "%.3g (a second prefill of another length)\n",
              prefill_error, decode_error, second_prefill_error);
}

TEST(CudaExecutor, RunsTheFixtureOrSaysWhatIsMissing) {
  auto manifest = bf16Plan();
  ASSERT_TRUE(manifest.ok()) << "the fixture does not convert to a bf16 plan: "
                             << manifest.error().message;
  auto weights = WeightStore::open(*manifest, {.source_path = kFixture, .check_source_stamp = false});
  ASSERT_TRUE(weights.ok()) << "fixture weights do not bind as bf16 plan weights: "
                            << weights.error().message;
  auto ex = CudaExecutor::create(*manifest, *weights, cpu::kvPoolConfigFor(*manifest, 8), 16,
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
  cpu::BatchInputs in{tokens, positions, slots, tables, 1, query_start, kv_lens};
  std::vector<float> logits(size_t((*ex)->vocabSize()));
  Status s = (*ex)->forward(in, logits);
  ASSERT_TRUE(s.ok()) << s.error().message;
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  // A bad batch fails before anything runs.
  std::vector<int32_t> bad_slots{0, 1, 2, 3, 1 << 20};
  cpu::BatchInputs bad{tokens, positions, bad_slots, tables, 1, query_start, kv_lens};
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
    cpu::BatchInputs decode{dt, dp, ds, dtables, 1, dq, dkv};
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

// A prefill of 1100 rows (five sequences of 220), past kFusedSwiGluMinRows:
// on Hopper the gate/up projection and silu_mul run as one gemm_swiglu_wgmma
// launch. Its logits must match the CPU executor on the fixture's f32 plan
// (the float reference) to the bf16 plan's tolerance, as the cuBLASLt +
// silu_mul path's do (--no-fused-swiglu), and differ from that path's (the
// fused one never rounds gate/up to bf16): both paths really ran.
TEST(CudaExecutor, FusedSwiGluPrefillMatchesTheCpuExecutor) {
  auto manifest = bf16Plan();
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  auto weights = WeightStore::open(*manifest, {.source_path = kFixture, .check_source_stamp = false});
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  constexpr int kSequences = 5, kLength = 220, kBlocks = (kLength + 15) / 16;
  constexpr int64_t kMaxTokens = kSequences * kLength;
  const KvPoolConfig kv = cpu::kvPoolConfigFor(*manifest, kSequences * kBlocks);
  auto fused = CudaExecutor::create(*manifest, *weights, kv, kMaxTokens, {.progress = false});
  if (!fused.ok()) {
    EXPECT_NE(fused.error().message.find("no CUDA backend"), std::string::npos) << fused.error().message;
    std::printf("no GPU: checked the error; the fused prefill needs the GPU machine\n");
    return;
  }
  auto unfused = CudaExecutor::create(*manifest, *weights, kv, kMaxTokens, {.progress = false, .tuning = {.fused_swiglu = false}});
  ASSERT_TRUE(unfused.ok()) << unfused.error().message;
  auto f32_manifest = Manifest::load(kFixture + "/artifact");
  ASSERT_TRUE(f32_manifest.ok()) << f32_manifest.error().message;
  auto f32_weights = WeightStore::open(*f32_manifest, {.source_path = kFixture, .check_source_stamp = false});
  ASSERT_TRUE(f32_weights.ok()) << f32_weights.error().message;
  auto cpu_ex = cpu::CpuExecutor::create(*f32_manifest, *f32_weights, cpu::kvPoolConfigFor(*f32_manifest, kSequences * kBlocks),
                                         kMaxTokens);
  ASSERT_TRUE(cpu_ex.ok()) << cpu_ex.error().message;

  const int64_t vocab = (*fused)->vocabSize();
  std::vector<int32_t> tokens, positions, slots, tables(size_t(kSequences * kBlocks)), query_start{0}, kv_lens;
  for (int b = 0; b < kSequences; ++b) {
    for (int i = 0; i < kLength; ++i) {
      tokens.push_back((i * 31 + b * 7 + 3) % int(vocab));
      positions.push_back(i);
      slots.push_back((b * kBlocks + i / 16) * 16 + i % 16);
    }
    for (int j = 0; j < kBlocks; ++j) tables[size_t(b * kBlocks + j)] = b * kBlocks + j;
    query_start.push_back(query_start.back() + kLength);
    kv_lens.push_back(kLength);
  }
  cpu::BatchInputs prefill{tokens, positions, slots, tables, kBlocks, query_start, kv_lens};
  std::vector<float> with(size_t(kSequences * vocab)), without(with.size()), reference(with.size());
  ASSERT_TRUE((*fused)->forward(prefill, with).ok());
  ASSERT_TRUE((*unfused)->forward(prefill, without).ok());
  ASSERT_TRUE((*cpu_ex)->forward(prefill, reference).ok());
  const double fused_error = relativeL2(with, reference), unfused_error = relativeL2(without, reference);
  EXPECT_LE(fused_error, 2e-2) << "fused SwiGLU prefill against the CPU executor's f32";
  EXPECT_LE(unfused_error, 2e-2) << "cuBLASLt + silu_mul prefill against the CPU executor's f32";
  EXPECT_NE(with, without) << "the fused and unfused prefills gave identical logits: did both paths run?";
  std::printf("prefill of %lld rows, logits against the CPU executor's f32: fused SwiGLU %.3g, cuBLASLt + "
              "silu_mul %.3g\n",
              (long long)kMaxTokens, fused_error, unfused_error);
}

// Out of GPU memory, two ways: KV pools larger than the card, and a
// --gpu-memory-fraction too small to leave a KV pool. Each error says what
// was asked and what was there; the failed executors free what they had
// allocated (the host keeps no copy of the pools), so a normal one still
// opens and runs after them.
TEST(CudaExecutor, OutOfMemorySaysWhatWasAskedAndWhatWasFree) {
  auto manifest = bf16Plan();
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  auto weights = WeightStore::open(*manifest, {.source_path = kFixture, .check_source_stamp = false});
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  const KvPoolConfig kv = cpu::kvPoolConfigFor(*manifest, 8);
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
  cpu::BatchInputs in{tokens, positions, slots, tables, 1, query_start, kv_lens};
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
