// The CUDA executor on the state-space fixtures (tiny-mamba, tiny-mamba2 and
// the tiny-hybrid Nemotron-H stack) against the CPU executor, which
// ssm_engine_test holds to the float64 references of
// test/reference/make_tiny_ssm_references.py:
//   - the executor alone: two sequences in state slots 2 and 0 prefilled in
//     chunks that cross the scan's chunks, batched raggedly, decoded side by
//     side, then one of them started over in the other's used slot (its
//     slot zeroed on the GPU); every batch's logits within 1e-4 relative L2
//     of the CPU's for the f32 plans (and the same argmax), 2e-2 for the
//     bf16 plans (artifact-bf16, kiln-compile --activation-type=bf16);
//   - the engine on the GPU: the reference's greedy continuations of all
//     ten prompts batched together, prompts prefilled whole, in chunks of
//     3 tokens, and with a 3-block KV pool that preempts, each equal to the
//     reference for the f32 plans, and every state slot and block back in
//     the pool at the end; the bf16 plans' first tokens against it.
// Without a GPU each test checks the CUDA executor's error and says why it
// stops, so ctest runs it everywhere; the runs need the GPU machine
// (scripts/gpu-check.sh's mamba part).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/backend/backend.h"
#include "runtime/backend/plan_kv_pool.h"
#include "runtime/cpu/executor/executor.h"
#include "runtime/cuda/executor/executor.h"
#include "runtime/engine/engine.h"
#include "runtime/kv/block_pool.h"
#include "runtime/weights/weight_store.h"
#include "test/source_root.h"

namespace kiln::cuda {
namespace {

constexpr double kF32Tolerance = 1e-4;   // relative L2, f32 GPU against f32 CPU
constexpr double kBf16Tolerance = 2e-2;  // relative L2, bf16 GPU against f32 CPU

// ||got - want|| / ||want||.
double relativeL2(std::span<const float> got, std::span<const float> want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  return std::sqrt(diff / norm);
}

int32_t argmax(std::span<const float> row) { return int32_t(std::max_element(row.begin(), row.end()) - row.begin()); }

// Without a GPU: the error must say so; true when the test should stop.
bool noGpu(const std::string& message, const char* what) {
  if (message.find("no CUDA backend") == std::string::npos) return false;
  std::printf("no GPU: checked the error (%s); %s needs the GPU machine\n",
              message.substr(0, message.find('\n')).c_str(), what);
  return true;
}

struct GreedyCase {
  std::vector<int32_t> prompt, tokens;
};

class CudaSsmTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    fixture_ = checkoutPath(std::string("test/fixtures/") + GetParam());
    std::ifstream file(fixture_ + "/reference.json");
    const nlohmann::json j = nlohmann::json::parse(file);
    for (const char* name : {"a", "b"}) tokens_[name] = j["sequences"][name]["tokens"].get<std::vector<int32_t>>();
    for (const auto& g : j["greedy"])
      greedy_.push_back({g["prompt"].get<std::vector<int32_t>>(), g["tokens"].get<std::vector<int32_t>>()});
  }

  // The executors side by side over one chunk schedule (see the file
  // comment); `folder` is the CUDA plan's artifact folder.
  void compareExecutors(const std::string& folder, double tolerance) {
    auto cpu_manifest = Manifest::load(fixture_ + "/artifact");
    ASSERT_TRUE(cpu_manifest.ok()) << cpu_manifest.error().message;
    auto manifest = Manifest::load(fixture_ + "/" + folder);
    ASSERT_TRUE(manifest.ok()) << manifest.error().message;
    ASSERT_FALSE(manifest->state_cache.layers.empty());
    const WeightStoreOptions source{.source_path = fixture_, .check_source_stamp = false};
    auto weights = WeightStore::open(*manifest, source);
    ASSERT_TRUE(weights.ok()) << weights.error().message;
    auto cpu_weights = WeightStore::open(*cpu_manifest, source);
    ASSERT_TRUE(cpu_weights.ok()) << cpu_weights.error().message;
    cpu_weights->materializeConcats();
    constexpr int64_t kBlocks = 16, kMaxTokens = 24, kSlots = 3;
    auto made = CudaExecutor::create(*manifest, *weights, kvPoolConfigFor(*manifest, kBlocks), kMaxTokens,
                                     {.progress = false, .state_slots = kSlots});
    if (!made.ok()) {
      ASSERT_TRUE(noGpu(made.error().message, "the executor comparison")) << made.error().message;
      return;
    }
    CudaExecutor& gpu = **made;
    ASSERT_NE(gpu.statePool(), nullptr);
    EXPECT_EQ(gpu.statePool()->numSlots(), kSlots);
    auto cpu_made = cpu::CpuExecutor::create(*cpu_manifest, *cpu_weights, kvPoolConfigFor(*cpu_manifest, kBlocks),
                                             kMaxTokens, kSlots);
    ASSERT_TRUE(cpu_made.ok()) << cpu_made.error().message;
    cpu::CpuExecutor& cpu = **cpu_made;
    const int64_t vocab = gpu.vocabSize();
    ASSERT_EQ(vocab, cpu.vocabSize());

    // The GPU executor's block pool hands out the blocks; the CPU's pool of
    // the same size takes the same tables.
    struct Seq {
      const std::vector<int32_t>* tokens;
      int32_t slot;
      BlockTable table;
      int64_t done = 0;
    };
    const int page = manifest->kv_cache.page_size;
    Seq a{&tokens_.at("a"), 2, BlockTable(page)};
    Seq b{&tokens_.at("b"), 0, BlockTable(page)};
    double worst = 0;
    int batches = 0;
    auto run = [&](std::vector<std::pair<Seq*, int64_t>> chunks) {
      std::vector<int32_t> tokens, positions, slots, query_start{0}, kv_lens, tables, state_slots;
      int max_blocks = 1;
      for (auto& [s, count] : chunks) {
        ASSERT_TRUE(s->table.append(gpu.blockPool(), count).ok());
        max_blocks = std::max(max_blocks, int(s->table.blocks().size()));
      }
      for (auto& [s, count] : chunks) {
        for (int64_t p = s->done; p < s->done + count; ++p) {
          tokens.push_back((*s->tokens)[size_t(p)]);
          positions.push_back(int32_t(p));
          slots.push_back(int32_t(*s->table.slot(p)));
        }
        s->done += count;
        query_start.push_back(int32_t(tokens.size()));
        kv_lens.push_back(int32_t(s->done));
        state_slots.push_back(s->slot);
        auto blocks = s->table.blocks();
        tables.insert(tables.end(), blocks.begin(), blocks.end());
        tables.resize(tables.size() + size_t(max_blocks) - blocks.size(), 0);
      }
      BatchInputs in{tokens, positions, slots, tables, max_blocks, query_start, kv_lens};
      in.state_slots = state_slots;
      std::vector<float> got(chunks.size() * size_t(vocab)), want(got.size());
      Status status = gpu.forward(in, got);
      ASSERT_TRUE(status.ok()) << status.error().message;
      status = cpu.forward(in, want);
      ASSERT_TRUE(status.ok()) << status.error().message;
      ++batches;
      for (size_t i = 0; i < chunks.size(); ++i) {
        const std::span<const float> g(got.data() + i * size_t(vocab), size_t(vocab));
        const std::span<const float> w(want.data() + i * size_t(vocab), size_t(vocab));
        const double error = relativeL2(g, w);
        worst = std::max(worst, error);
        EXPECT_LE(error, tolerance) << GetParam() << " " << folder << ": batch " << batches << ", sequence " << i
                                    << " at position " << chunks[i].first->done - 1;
        if (tolerance <= kF32Tolerance)
          EXPECT_EQ(argmax(g), argmax(w)) << GetParam() << ": batch " << batches << ", sequence " << i;
      }
    };
    run({{&a, 13}});
    run({{&a, 1}, {&b, 19}});
    run({{&b, 2}, {&a, 16}});
    while (a.done < int64_t(a.tokens->size())) {
      std::vector<std::pair<Seq*, int64_t>> chunks{{&a, 1}};
      if (b.done < int64_t(b.tokens->size())) chunks.push_back({&b, 1});
      run(chunks);
    }
    // Sequence a again from position 0, in slot 0 (b's state is there) and
    // fresh blocks: the GPU zeroes the slot before the steps, as the CPU does.
    a.table.release(gpu.blockPool());
    b.table.release(gpu.blockPool());
    Seq again{&tokens_.at("a"), 0, BlockTable(page)};
    run({{&again, 11}});
    run({{&again, 1}});
    run({{&again, 9}});
    std::printf("%s %s: %d batches, worst relative L2 against the CPU %.3g\n", GetParam(), folder.c_str(), batches,
                worst);
    RecordProperty("worst_relative_l2", std::to_string(worst));
  }

  std::unique_ptr<Engine> openGpuEngine(const std::string& folder, int64_t kv_tokens, int64_t batch_tokens) {
    EngineOptions options;
    options.device = "cuda";
    options.progress = false;
    options.model_source = fixture_;
    options.kv_cache_tokens = kv_tokens;
    options.max_batch_tokens = batch_tokens;
    options.max_sequences = 4;
    auto engine = Engine::open(fixture_ + "/" + folder, options);
    if (!engine.ok()) {
      EXPECT_TRUE(noGpu(engine.error().message, "the engine run")) << engine.error().message;
      return nullptr;
    }
    return engine.take();
  }

  // Every greedy prompt submitted at once; each request's tokens. The
  // engine must end idle with every state slot and KV block free.
  std::vector<std::vector<int32_t>> runGreedy(Engine& engine) {
    std::map<int64_t, std::vector<int32_t>> produced;
    std::vector<int64_t> ids;
    for (const GreedyCase& g : greedy_) {
      GenerationRequest r;
      r.prompt_tokens = g.prompt;
      r.sampling.max_tokens = int(g.tokens.size());
      r.sampling.ignore_eos = true;
      auto id = engine.submit(r, [&](int64_t id, int32_t token, std::string_view) {
        if (token >= 0) produced[id].push_back(token);
      });
      EXPECT_TRUE(id.ok()) << id.error().message;
      if (id.ok()) ids.push_back(*id);
    }
    Status run = engine.runUntilIdle();
    EXPECT_TRUE(run.ok()) << run.error().message;
    StatePool* states = engine.backend().statePool();
    EXPECT_NE(states, nullptr);
    if (states) EXPECT_EQ(states->numFree(), states->numSlots()) << "a state slot leaked";
    EXPECT_EQ(engine.backend().blockPool().numUsed(), 0) << "a KV block leaked";
    std::vector<std::vector<int32_t>> out;
    for (int64_t id : ids) out.push_back(produced[id]);
    return out;
  }

  void expectReferenceGreedy(Engine& engine, const char* what) {
    auto produced = runGreedy(engine);
    ASSERT_EQ(produced.size(), greedy_.size());
    for (size_t i = 0; i < produced.size(); ++i)
      EXPECT_EQ(produced[i], greedy_[i].tokens) << GetParam() << " (" << what << "): prompt " << i;
  }

  std::string fixture_;
  std::map<std::string, std::vector<int32_t>> tokens_;
  std::vector<GreedyCase> greedy_;
};

TEST_P(CudaSsmTest, F32ExecutorMatchesTheCpu) { compareExecutors("artifact", kF32Tolerance); }

TEST_P(CudaSsmTest, Bf16ExecutorMatchesTheCpuWithinBf16) { compareExecutors("artifact-bf16", kBf16Tolerance); }

// The f32 plan in the engine on the GPU: the reference's continuations with
// prompts prefilled whole, in chunks of 3 tokens, and through preemption
// (a pool of 3 blocks of 16 for 4 running sequences of up to 34 tokens:
// slots released, sequences recomputed from the zero state).
TEST_P(CudaSsmTest, F32EngineGreedyMatchesReferenceWholeChunkedAndPreempted) {
  if (auto engine = openGpuEngine("artifact", 4096, 256)) {
    EXPECT_EQ(engine->backend().name().rfind("cuda", 0), 0u) << engine->backend().name();
    expectReferenceGreedy(*engine, "prompts whole");
  } else {
    return;
  }
  if (auto engine = openGpuEngine("artifact", 4096, 3)) expectReferenceGreedy(*engine, "chunks of 3");
  if (auto engine = openGpuEngine("artifact", 48, 64)) {
    expectReferenceGreedy(*engine, "3-block pool");
    EXPECT_GT(engine->metrics().preemptions, 0);
  }
}

// The bf16 plan in the engine: whole prompts and chunks of 3 both run to
// the end with nothing leaked; the first token of each continuation (the
// prefill's argmax) is the reference's on at least 9 of the 10 prompts
// (bf16 rounding may flip a near tie, as the 9-of-10 bar allows).
TEST_P(CudaSsmTest, Bf16EngineFirstTokensMatchReference) {
  for (int64_t batch_tokens : {256, 3}) {
    auto engine = openGpuEngine("artifact-bf16", 4096, batch_tokens);
    if (!engine) return;
    auto produced = runGreedy(*engine);
    ASSERT_EQ(produced.size(), greedy_.size());
    int first = 0, whole = 0;
    for (size_t i = 0; i < produced.size(); ++i) {
      ASSERT_EQ(produced[i].size(), greedy_[i].tokens.size()) << "prompt " << i;
      first += produced[i][0] == greedy_[i].tokens[0] ? 1 : 0;
      whole += produced[i] == greedy_[i].tokens ? 1 : 0;
    }
    std::printf("%s bf16, token budget %lld: first tokens %d/10, whole continuations %d/10 equal to the reference\n",
                GetParam(), static_cast<long long>(batch_tokens), first, whole);
    EXPECT_GE(first, 9) << GetParam() << ", token budget " << batch_tokens;
  }
}

// A plan with state-space layers needs slots: refused by name without them.
TEST(CudaSsm, RefusesAStatePlanWithoutSlots) {
  const std::string fixture = checkoutPath("test/fixtures/tiny-mamba2");
  auto manifest = Manifest::load(fixture + "/artifact");
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  auto weights = WeightStore::open(*manifest, {.source_path = fixture, .check_source_stamp = false});
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  auto made = CudaExecutor::create(*manifest, *weights, kvPoolConfigFor(*manifest, 8), 16, {.progress = false});
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.error().message.find("state slots > 0"), std::string::npos) << made.error().message;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaSsmTest, ::testing::Values("tiny-mamba", "tiny-mamba2", "tiny-hybrid"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace kiln::cuda
