// State-space models through the whole path on the CPU: the committed
// artifacts of tiny-mamba, tiny-mamba2 and tiny-hybrid (kiln-compile's plan,
// checked against the compiler by the manifest fixture tests) run by the
// CPU executor and the engine, against the float64 references of
// test/reference/make_tiny_ssm_references.py (transformers' forwards):
//   - f32 logits within 1e-4 at every position a batch ends on, for two
//     sequences prefilled in chunks, batched raggedly, then decoded;
//   - the engine's greedy continuations equal the reference's for every
//     prompt, all requests batched together, with a token budget that
//     splits the prompts into chunks, and with a KV pool so small that
//     sequences are preempted and recomputed;
//   - every state slot is back in the pool once the engine is idle.
#include "runtime/engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "runtime/backend/backend.h"
#include "runtime/backend/plan_kv_pool.h"
#include "runtime/cpu/executor/executor.h"
#include "runtime/weights/weight_store.h"
#include "test/source_root.h"

namespace kiln {
namespace {

constexpr double kTolerance = 1e-4;  // max |logit - reference|, f32 against float64

struct Reference {
  std::vector<int32_t> tokens;
  std::vector<std::vector<double>> logits;  // [len, vocab]
};

struct GreedyCase {
  std::vector<int32_t> prompt, tokens;
};

struct Fixture {
  std::map<std::string, Reference> sequences;
  std::vector<GreedyCase> greedy;
};

Fixture readReference(const std::string& dir) {
  Fixture f;
  std::ifstream file(dir + "/reference.json");
  nlohmann::json j = nlohmann::json::parse(file);
  for (auto& [name, seq] : j["sequences"].items())
    f.sequences[name] = {seq["tokens"].get<std::vector<int32_t>>(),
                         seq["logits"].get<std::vector<std::vector<double>>>()};
  for (const auto& g : j["greedy"])
    f.greedy.push_back({g["prompt"].get<std::vector<int32_t>>(), g["tokens"].get<std::vector<int32_t>>()});
  return f;
}

class SsmPathTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    fixture_ = checkoutPath(std::string("test/fixtures/") + GetParam());
    reference_ = readReference(fixture_);
  }

  std::unique_ptr<Engine> open(int64_t kv_tokens, int64_t batch_tokens) {
    EngineOptions options;
    options.device = "cpu";
    options.progress = false;
    options.threads = 2;
    options.model_source = fixture_;
    options.kv_cache_tokens = kv_tokens;
    options.max_batch_tokens = batch_tokens;
    options.max_sequences = 4;
    auto engine = Engine::open(fixture_ + "/artifact", options);
    EXPECT_TRUE(engine.ok()) << engine.error().message;
    return engine.ok() ? engine.take() : nullptr;
  }

  // Every greedy prompt submitted at once; each request's tokens.
  std::vector<std::vector<int32_t>> runGreedy(Engine& engine) {
    std::map<int64_t, std::vector<int32_t>> produced;
    std::vector<int64_t> ids;
    for (const GreedyCase& g : reference_.greedy) {
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
    std::vector<std::vector<int32_t>> out;
    for (int64_t id : ids) out.push_back(produced[id]);
    return out;
  }

  void expectReferenceGreedy(Engine& engine, const char* what) {
    auto produced = runGreedy(engine);
    ASSERT_EQ(produced.size(), reference_.greedy.size());
    for (size_t i = 0; i < produced.size(); ++i)
      EXPECT_EQ(produced[i], reference_.greedy[i].tokens) << GetParam() << " (" << what << "): prompt " << i;
    StatePool* states = engine.backend().statePool();
    ASSERT_NE(states, nullptr);
    EXPECT_EQ(states->numFree(), states->numSlots()) << "a state slot leaked";
    const EngineMetrics metrics = engine.metrics();
    EXPECT_EQ(metrics.state_slots_total, 4);
    EXPECT_EQ(metrics.state_slots_free, 4);
    const StatePoolConfig& config = states->config();
    EXPECT_EQ(metrics.state_bytes, 4 * config.slotBytes());
    EXPECT_EQ(engine.backend().blockPool().numUsed(), 0) << "a KV block leaked";
  }

  std::string fixture_;
  Fixture reference_;
};

// The executor alone: sequences a (40 tokens) and b (24) in state slots 2
// and 0, prefilled in chunks that cross the scan's 8-token chunks, batched
// raggedly, then decoded side by side; every batch's last-token logits
// against the reference.
TEST_P(SsmPathTest, ExecutorLogitsMatchReference) {
  auto manifest = Manifest::load(fixture_ + "/artifact");
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  ASSERT_FALSE(manifest->state_cache.layers.empty());
  auto weights = WeightStore::open(*manifest, {.source_path = fixture_, .check_source_stamp = false});
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  weights->materializeConcats();
  auto made = cpu::CpuExecutor::create(*manifest, *weights, kvPoolConfigFor(*manifest, 16), /*max_tokens=*/24,
                                       /*state_slots=*/3);
  ASSERT_TRUE(made.ok()) << made.error().message;
  cpu::CpuExecutor& ex = **made;
  const Reference& ra = reference_.sequences.at("a");
  const Reference& rb = reference_.sequences.at("b");

  struct Seq {
    const Reference* ref;
    int32_t slot;
    BlockTable table;
    int64_t done = 0;
  };
  Seq a{&ra, 2, BlockTable(manifest->kv_cache.page_size)};
  Seq b{&rb, 0, BlockTable(manifest->kv_cache.page_size)};
  double worst = 0;
  auto run = [&](std::vector<std::pair<Seq*, int64_t>> chunks) {
    std::vector<int32_t> tokens, positions, slots, query_start{0}, kv_lens, tables, state_slots;
    int max_blocks = 1;
    for (auto& [s, count] : chunks) {
      ASSERT_TRUE(s->table.append(ex.blockPool(), count).ok());
      max_blocks = std::max(max_blocks, int(s->table.blocks().size()));
    }
    for (auto& [s, count] : chunks) {
      for (int64_t p = s->done; p < s->done + count; ++p) {
        tokens.push_back(s->ref->tokens[size_t(p)]);
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
    std::vector<float> logits(chunks.size() * size_t(ex.vocabSize()));
    Status status = ex.forward(in, logits);
    ASSERT_TRUE(status.ok()) << status.error().message;
    for (size_t i = 0; i < chunks.size(); ++i) {
      const Seq& s = *chunks[i].first;
      const std::vector<double>& ref = s.ref->logits[size_t(s.done - 1)];
      double diff = 0;
      for (size_t v = 0; v < ref.size(); ++v)
        diff = std::max(diff, std::fabs(double(logits[i * ref.size() + v]) - ref[v]));
      EXPECT_LE(diff, kTolerance) << GetParam() << ": position " << s.done - 1;
      worst = std::max(worst, diff);
    }
  };
  run({{&a, 13}});
  run({{&a, 1}, {&b, 19}});
  run({{&b, 2}, {&a, 16}});
  while (a.done < int64_t(ra.tokens.size())) {
    std::vector<std::pair<Seq*, int64_t>> chunks{{&a, 1}};
    if (b.done < int64_t(rb.tokens.size())) chunks.push_back({&b, 1});
    run(chunks);
  }
  EXPECT_EQ(b.done, int64_t(rb.tokens.size()));
  std::printf("%s: max |logits - float64 reference| = %.3g\n", GetParam(), worst);
  RecordProperty("max_abs_logit_diff", std::to_string(worst));
}

// All prompts batched in one engine, prompts prefilled whole.
TEST_P(SsmPathTest, EngineGreedyMatchesReference) {
  auto engine = open(/*kv_tokens=*/4096, /*batch_tokens=*/256);
  ASSERT_NE(engine, nullptr);
  expectReferenceGreedy(*engine, "batched");
}

// A token budget of 3: every prompt is prefilled in chunks of up to 3 rows,
// beside other sequences' decode tokens.
TEST_P(SsmPathTest, ChunkedPrefillGivesTheSameTokens) {
  auto engine = open(/*kv_tokens=*/4096, /*batch_tokens=*/3);
  ASSERT_NE(engine, nullptr);
  expectReferenceGreedy(*engine, "chunks of 3");
}

// A pool of 3 blocks of 16 for 4 running sequences of up to 34 tokens:
// sequences are preempted (their state slot released) and recomputed.
TEST_P(SsmPathTest, PreemptionLeavesOutputsUnchanged) {
  auto engine = open(/*kv_tokens=*/48, /*batch_tokens=*/64);
  ASSERT_NE(engine, nullptr);
  expectReferenceGreedy(*engine, "tiny pool");
  EXPECT_GT(engine->metrics().preemptions, 0);
}

// Requests the state cache cannot serve are refused at submit, by name.
TEST_P(SsmPathTest, RefusesParallelSamplingAndSpeculation) {
  auto engine = open(/*kv_tokens=*/4096, /*batch_tokens=*/64);
  ASSERT_NE(engine, nullptr);
  GenerationRequest r;
  r.prompt_tokens = reference_.greedy[0].prompt;
  r.sampling.n = 2;
  auto refused = engine->submit(r, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("state-space"), std::string::npos) << refused.error().message;
  auto scored = engine->scoreTokens(reference_.greedy[0].prompt);
  ASSERT_FALSE(scored.ok());
  EXPECT_NE(scored.error().message.find("state-space"), std::string::npos) << scored.error().message;
}

// A state-space model without attention holds no per-token state, so its
// context is not the 2048 tokens assumed for configs that name no limit: a
// prompt past that prefills and decodes. The hybrid keeps attention layers
// (a KV cache per token) and the default.
TEST_P(SsmPathTest, ContextIsUnboundedWithoutAttention) {
  auto engine = open(/*kv_tokens=*/4096, /*batch_tokens=*/512);
  ASSERT_NE(engine, nullptr);
  const bool attention = std::string(GetParam()) == "tiny-hybrid";
  EXPECT_EQ(engine->contextLength(), attention ? 2048 : int64_t(1) << 20);
  if (attention) return;
  GenerationRequest r;
  for (int i = 0; i < 3000; ++i) r.prompt_tokens.push_back(int32_t(1 + (i * 37) % 120));
  r.sampling.max_tokens = 4;
  r.sampling.ignore_eos = true;
  int produced = 0;
  auto id = engine->submit(r, [&](int64_t, int32_t token, std::string_view) { produced += token >= 0; });
  ASSERT_TRUE(id.ok()) << id.error().message;
  Status run = engine->runUntilIdle();
  ASSERT_TRUE(run.ok()) << run.error().message;
  EXPECT_EQ(produced, 4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SsmPathTest, ::testing::Values("tiny-mamba", "tiny-mamba2", "tiny-hybrid"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace kiln
