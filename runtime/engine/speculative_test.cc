// Speculative decoding on the real SmolLM2 artifact compiled with a verify
// entry (the ctest fixture, --spec-tree=widths:2,2,2,1,1,1): greedy output
// with n-gram drafts is token for token the output without, alone, batched
// with plain requests, under preemption and with the prefix cache; rejected
// drafts leave no block behind; bad settings are refused at submit. The
// same for drafts of a draft model: SmolLM2 drafting for itself, whose
// drafts the target accepts nearly always.
#include "runtime/engine/engine.h"

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "runtime/engine/spec_test_support.h"
#include "test/source_root.h"

namespace kiln {
namespace {

using namespace spec_testing;

std::unique_ptr<Engine> openEngine(EngineOptions options = {}) {
  options.progress = false;
  options.threads = 2;
  options.device = "cpu";
  auto engine = Engine::open(artifactDir(), options);
  if (!engine.ok()) {
    const char* require = std::getenv("KILN_REQUIRE_MODELS");
    if (require && std::string(require) == "1")
      ADD_FAILURE() << "KILN_REQUIRE_MODELS=1 but the engine cannot open " << artifactDir() << ": "
                    << engine.error().message;
    return nullptr;
  }
  return engine.take();
}

#define OPEN_OR_SKIP(engine, ...)   \
  auto engine = openEngine(__VA_ARGS__); \
  if (!engine) GTEST_SKIP() << "SmolLM2 spec artifact unavailable (run scripts/setup.sh)"

GenerationRequest greedy(const std::string& prompt, int max_tokens, std::vector<int64_t> widths = {}) {
  return greedyRequest(prompt, max_tokens, SpecMethod::kNgram, std::move(widths));
}

// A prompt the model continues by repeating it, where drafts are accepted.
const std::string kRepetitive =
    "Copy the list exactly.\nred green blue yellow red green blue yellow red green blue yellow red green blue";
const std::vector<std::string> kPrompts = {"The three primary colors are", "def fibonacci(n):", kRepetitive};

std::vector<std::vector<int32_t>> plainOutputs(Engine& engine, int max_tokens) {
  std::vector<std::vector<int32_t>> out;
  for (const std::string& p : kPrompts) {
    std::vector<int64_t> ids;
    out.push_back(runAll(engine, {greedy(p, max_tokens)}, ids)[ids[0]]);
  }
  return out;
}

TEST(SpeculativeTest, ChainAndTreeDraftsKeepTheGreedyTokens) {
  OPEN_OR_SKIP(engine);
  const std::vector<std::vector<int32_t>> plain = plainOutputs(*engine, 40);
  for (const std::vector<int64_t>& widths : {std::vector<int64_t>{1, 1, 1, 1}, std::vector<int64_t>{2, 2, 2, 1}}) {
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      std::vector<int64_t> ids;
      const int64_t steps_before = engine->metrics().steps;
      auto out = runAll(*engine, {greedy(kPrompts[i], 40, widths)}, ids);
      const int64_t steps = engine->metrics().steps - steps_before;
      EXPECT_EQ(out[ids[0]], plain[i]) << "prompt " << i << " tree " << widths.size() << "x" << widths[0];
      const RequestStats& stats = *engine->stats(ids[0]);
      EXPECT_EQ(stats.generated_tokens, 40);
      if (kPrompts[i] == kRepetitive) {
        // The repetition's drafts are mostly right: well over one token
        // accepted a verify row, so far fewer forwards than tokens.
        EXPECT_GT(stats.spec_rows, 0);
        EXPECT_GT(stats.spec_accepted_tokens, 2 * stats.spec_rows)
            << stats.spec_accepted_tokens << " accepted of " << stats.spec_drafted_tokens << " in "
            << stats.spec_rows << " rows";
        EXPECT_LT(steps, 30);
      }
    }
  }
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
}

// Spec and plain requests in one batch, a pool too small for all of them
// (preemption), the prefix cache on: every output is its plain solo output,
// and the rollback of rejected drafts leaves no block held.
TEST(SpeculativeTest, BatchedWithPlainRequestsUnderPreemption) {
  OPEN_OR_SKIP(roomy);
  const std::vector<std::vector<int32_t>> plain = plainOutputs(*roomy, 36);
  EngineOptions tight;
  tight.kv_cache_tokens = 160;  // 10 blocks of 16; each request needs 4 alone
  tight.prefix_cache = true;
  OPEN_OR_SKIP(engine, tight);
  std::vector<GenerationRequest> all;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    all.push_back(greedy(kPrompts[i], 36, {1, 1, 1, 1, 1}));
    all.push_back(greedy(kPrompts[i], 36));
  }
  std::vector<int64_t> ids;
  auto out = runAll(*engine, all, ids);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(engine->stats(ids[i])->finish, FinishReason::kLength) << engine->stats(ids[i])->error;
    EXPECT_EQ(out[ids[i]], plain[i / 2]) << "request " << i;
  }
  const EngineMetrics m = engine->metrics();
  EXPECT_GT(m.preemptions, 0);
  EXPECT_GT(m.spec_accepted_tokens, 0);
  EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
  // A second round hits the cache that the first filled (accepted tokens only).
  std::vector<int64_t> again;
  auto out2 = runAll(*engine, {greedy(kRepetitive, 36, {2, 2, 1})}, again);
  EXPECT_EQ(out2[again[0]], plain[2]);
  EXPECT_GT(engine->metrics().prefix_hit_tokens, 0);
  const EngineMetrics end = engine->metrics();
  EXPECT_EQ(end.kv_blocks_free + end.kv_blocks_cached, end.kv_blocks_total);
}

// Sampled requests speculate by speculative sampling (its distribution is
// checked in runtime/sampling/sampler_test.cc): the repetition's drafts are
// accepted, a seed gives the same tokens again, no block is left held.
TEST(SpeculativeTest, SampledRequestsSpeculateReproducibly) {
  OPEN_OR_SKIP(engine);
  GenerationRequest r = greedy(kRepetitive, 40, {1, 1, 1, 1});
  r.sampling.temperature = 0.5f;
  r.sampling.seed = 5;
  std::vector<int64_t> ids;
  auto first = runAll(*engine, {r, r}, ids);
  EXPECT_EQ(first[ids[0]], first[ids[1]]);
  EXPECT_EQ(first[ids[0]].size(), 40u);
  const RequestStats& stats = *engine->stats(ids[0]);
  EXPECT_GT(stats.spec_accepted_tokens, 0) << stats.spec_drafted_tokens << " drafted";
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
}

TEST(SpeculativeTest, BadSettingsAreRefusedAtSubmit) {
  OPEN_OR_SKIP(engine);
  auto refused = [&](GenerationRequest r) {
    auto id = engine->submit(std::move(r), {});
    return id.ok() ? std::string("accepted") : id.error().message;
  };
  EXPECT_EQ(refused(greedy("Hi", 4, {1, 1, 1, 1, 1, 1, 1})),
            "the draft tree chain:7 has 8 nodes and depth 7, more than the artifact's verify entry holds (39 nodes, "
            "depth 6): compile with kiln-compile --spec-tree=chain:7 or draft less");
  EXPECT_EQ(refused(greedy("Hi", 4, {8, 4})),
            "the draft tree widths:8,4 has 41 nodes and depth 2, more than the artifact's verify entry holds (39 "
            "nodes, depth 6): compile with kiln-compile --spec-tree=widths:8,4 or draft less");
  GenerationRequest empty = greedy("Hi", 4);
  empty.speculation.method = SpecMethod::kNgram;
  EXPECT_EQ(refused(empty), "speculative decoding needs at least one draft token (k >= 1)");
  EXPECT_TRUE(engine->idle());
}

// SmolLM2 as its own draft model.
EngineOptions withSelfDraft(EngineOptions options = {}) {
  options.draft_model = artifactDir();
  return options;
}

GenerationRequest drafted(const std::string& prompt, int max_tokens, std::vector<int64_t> widths) {
  GenerationRequest r = greedy(prompt, max_tokens, std::move(widths));
  r.speculation.method = SpecMethod::kDraftModel;
  return r;
}

// Greedy with the draft model's chain or tree is plain greedy token for
// token; the draft is the target itself, so its greedy chain is the
// target's own and nearly every draft token is accepted.
TEST(DraftModelTest, ChainAndTreeDraftsKeepTheGreedyTokens) {
  OPEN_OR_SKIP(engine, withSelfDraft());
  const std::vector<std::vector<int32_t>> plain = plainOutputs(*engine, 32);
  for (const std::vector<int64_t>& widths : {std::vector<int64_t>{1, 1, 1, 1}, std::vector<int64_t>{2, 2, 1}}) {
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      std::vector<int64_t> ids;
      auto out = runAll(*engine, {drafted(kPrompts[i], 32, widths)}, ids);
      EXPECT_EQ(out[ids[0]], plain[i]) << "prompt " << i << " tree of depth " << widths.size();
      const RequestStats& stats = *engine->stats(ids[0]);
      EXPECT_GT(stats.spec_rows, 0);
      if (widths[0] == 1)
        EXPECT_GE(double(stats.spec_accepted_tokens), 0.9 * double(stats.spec_drafted_tokens))
            << stats.spec_accepted_tokens << " of " << stats.spec_drafted_tokens << ", prompt " << i;
      else  // each depth has one right child of the widths: the chain's share
        EXPECT_GE(stats.spec_accepted_tokens, 3 * stats.spec_rows - stats.spec_rows / 4) << "prompt " << i;
    }
  }
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
  // Finished sequences give their draft KV back at the next step.
  EXPECT_EQ(m.draft_sequences, 0);
  EXPECT_EQ(m.draft_kv_blocks_free, m.draft_kv_blocks_total);
}

// Draft-model, n-gram and plain requests in one batch under preemption:
// every output is its plain solo output; the draft KV of every sequence
// (preempted ones included) goes back to the draft pool.
TEST(DraftModelTest, BatchedWithPlainAndNgramRequestsUnderPreemption) {
  OPEN_OR_SKIP(roomy);
  const std::vector<std::vector<int32_t>> plain = plainOutputs(*roomy, 36);
  EngineOptions tight = withSelfDraft();
  tight.kv_cache_tokens = 160;  // 10 blocks of 16; each request needs 4 alone
  OPEN_OR_SKIP(engine, tight);
  std::vector<GenerationRequest> all;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    all.push_back(drafted(kPrompts[i], 36, {1, 1, 1}));
    all.push_back(greedy(kPrompts[i], 36));
    all.push_back(greedy(kPrompts[i], 36, {1, 1, 1, 1}));
  }
  std::vector<int64_t> ids;
  auto out = runAll(*engine, all, ids);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(engine->stats(ids[i])->finish, FinishReason::kLength) << engine->stats(ids[i])->error;
    EXPECT_EQ(out[ids[i]], plain[i / 3]) << "request " << i;
  }
  const EngineMetrics m = engine->metrics();
  EXPECT_GT(m.preemptions, 0);
  EXPECT_GT(engine->stats(ids[0])->spec_accepted_tokens, 0);
  EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
  EXPECT_EQ(m.draft_sequences, 0);
  EXPECT_EQ(m.draft_kv_blocks_free, m.draft_kv_blocks_total);
}

// A sampled request speculates with the draft model's greedy drafts by
// speculative sampling: a seed gives the same tokens again, and drafts
// are accepted.
TEST(DraftModelTest, SampledRequestsSpeculateReproducibly) {
  OPEN_OR_SKIP(engine, withSelfDraft());
  GenerationRequest r = drafted("The three primary colors are", 24, {1, 1, 1});
  r.sampling.temperature = 0.5f;
  r.sampling.seed = 9;
  std::vector<int64_t> ids;
  auto out = runAll(*engine, {r, r}, ids);
  EXPECT_EQ(out[ids[0]], out[ids[1]]);
  EXPECT_EQ(out[ids[0]].size(), 24u);
  EXPECT_GT(engine->stats(ids[0])->spec_accepted_tokens, 0);
  EXPECT_EQ(engine->metrics().draft_sequences, 0);
}

TEST(DraftModelTest, BadSettingsAreRefused) {
  {
    // No draft model opened.
    OPEN_OR_SKIP(engine);
    auto id = engine->submit(drafted("Hi", 4, {1, 1}), {});
    ASSERT_FALSE(id.ok());
    EXPECT_EQ(id.error().message,
              "speculation by a draft model: this engine has none (EngineOptions::draft_model; kiln: "
              "--spec=draft:PATH)");
  }
  OPEN_OR_SKIP(engine, withSelfDraft());
  auto refused = [&](GenerationRequest r) {
    auto id = engine->submit(std::move(r), {});
    return id.ok() ? std::string("accepted") : id.error().message;
  };
  EXPECT_EQ(refused(drafted("Hi", 4, {})), "speculative decoding needs at least one draft token (k >= 1)");
  EXPECT_EQ(refused(drafted("Hi", 4, {8, 4})),
            "the draft tree widths:8,4 has 41 nodes and depth 2; the draft model drafts a tree through its own verify "
            "entry, which holds 39 nodes and depth 6: compile the draft with kiln-compile --spec-tree=widths:8,4");
  EXPECT_EQ(refused(drafted("Hi", 4, {1, 1, 1, 1, 1, 1, 1})),
            "the draft tree chain:7 has 8 nodes and depth 7, more than the artifact's verify entry holds (39 nodes, "
            "depth 6): compile with kiln-compile --spec-tree=chain:7 or draft less");
  EXPECT_TRUE(engine->idle());
  // A draft with another vocabulary (the 128-token tiny Llama) is refused
  // when the engine opens.
  EngineOptions other;
  other.progress = false;
  other.device = "cpu";
  other.draft_model = checkoutPath("test/fixtures/tiny-llama/artifact");
  other.draft_model_source = checkoutPath("test/fixtures/tiny-llama");  // the fixture records no mtime
  auto opened = Engine::open(artifactDir(), other);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().message,
            fmt::format("draft model {}: its vocabulary has 128 tokens, the target's 49152: a draft model must share "
                        "the target's vocabulary",
                        other.draft_model));
}

// LayerSkip on an artifact with a verify entry but no draft entry (this
// one) is refused at submit, naming the compile flag.
TEST(LayerSkipTest, ArtifactWithoutDraftEntryIsRefused) {
  OPEN_OR_SKIP(engine);
  GenerationRequest r = spec_testing::greedyRequest("Hi", 4, SpecMethod::kLayerSkip, {1, 1});
  r.speculation.layerskip = 24;
  auto id = engine->submit(r, {});
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.error().message,
            "--spec=layerskip:24: the artifact has no draft entry on the cpu backend: compile it with kiln-compile "
            "--spec-layerskip 24 --spec-tree=...");
}

}  // namespace
}  // namespace kiln
