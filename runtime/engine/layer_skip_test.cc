// LayerSkip self-speculation on the real SmolLM2 artifact compiled with a
// draft entry of its first 24 of 30 layers (the ctest fixture,
// --spec-tree=widths:2,2,2,1,1,1 --spec-layerskip 24): greedy output is token
// for token the output without speculation, for chains and trees, alone and
// batched with plain requests; drafts are verified and some accepted; bad K
// is refused at submit naming K and the layer count.
#include "runtime/engine/engine.h"

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/engine/spec_test_support.h"

namespace kiln {
namespace {

using spec_testing::runAll;

std::string artifactDir() {
  const char* dir = std::getenv("KILN_SMOLLM2_LAYERSKIP_ARTIFACT");
  return dir ? dir : "(KILN_SMOLLM2_LAYERSKIP_ARTIFACT unset: run this test through ctest)";
}

std::unique_ptr<Engine> openEngine(std::string dir = artifactDir()) {
  EngineOptions options;
  options.progress = false;
  options.threads = 2;
  options.device = "cpu";
  auto engine = Engine::open(dir, options);
  if (!engine.ok()) {
    const char* require = std::getenv("KILN_REQUIRE_MODELS");
    if (require && std::string(require) == "1")
      ADD_FAILURE() << "KILN_REQUIRE_MODELS=1 but the engine cannot open " << dir << ": " << engine.error().message;
    return nullptr;
  }
  return engine.take();
}

#define OPEN_OR_SKIP(engine)     \
  auto engine = openEngine();    \
  if (!engine) GTEST_SKIP() << "SmolLM2 layerskip artifact unavailable (run scripts/setup.sh)"

constexpr int64_t kLayers = 24;

GenerationRequest request(const std::string& prompt, int max_tokens, std::vector<int64_t> widths = {},
                          int64_t layers = kLayers) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  if (!widths.empty()) {
    r.speculation.method = SpecMethod::kLayerSkip;
    r.speculation.layerskip = layers;
    r.speculation.tree.widths = std::move(widths);
  }
  return r;
}

const std::vector<std::string> kPrompts = {
    "The three primary colors are", "def fibonacci(n):",
    "Copy the list exactly.\nred green blue yellow red green blue yellow red green blue yellow red green blue"};

TEST(LayerSkipTest, ChainAndTreeDraftsKeepTheGreedyTokens) {
  OPEN_OR_SKIP(engine);
  std::vector<std::vector<int32_t>> plain;
  for (const std::string& p : kPrompts) {
    std::vector<int64_t> ids;
    plain.push_back(runAll(*engine, {request(p, 32)}, ids)[ids[0]]);
  }
  for (const std::vector<int64_t>& widths : {std::vector<int64_t>{1, 1, 1, 1}, std::vector<int64_t>{2, 2, 1}}) {
    int64_t drafted = 0, accepted = 0;
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      std::vector<int64_t> ids;
      auto out = runAll(*engine, {request(kPrompts[i], 32, widths)}, ids);
      EXPECT_EQ(out[ids[0]], plain[i]) << "prompt " << i << " tree of depth " << widths.size();
      const RequestStats& stats = *engine->stats(ids[0]);
      EXPECT_GT(stats.spec_rows, 0) << "prompt " << i;
      drafted += stats.spec_drafted_tokens;
      accepted += stats.spec_accepted_tokens;
    }
    // 24 of 30 layers agree with the whole model now and then, not always.
    EXPECT_GT(accepted, 0);
    EXPECT_LT(accepted, drafted);
    std::printf("layerskip:%lld widths %zu..: %lld of %lld drafts accepted\n", (long long)kLayers, widths.size(),
                (long long)accepted, (long long)drafted);
  }
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
}

// Self-draft, n-gram and plain requests in one batch: each output is its
// plain solo output.
TEST(LayerSkipTest, BatchedWithPlainAndNgramRequests) {
  OPEN_OR_SKIP(engine);
  std::vector<std::vector<int32_t>> plain;
  for (const std::string& p : kPrompts) {
    std::vector<int64_t> ids;
    plain.push_back(runAll(*engine, {request(p, 24)}, ids)[ids[0]]);
  }
  std::vector<GenerationRequest> all;
  for (const std::string& p : kPrompts) {
    all.push_back(request(p, 24, {1, 1, 1}));
    all.push_back(request(p, 24));
    GenerationRequest ngram = request(p, 24, {1, 1, 1, 1});
    ngram.speculation.method = SpecMethod::kNgram;
    all.push_back(ngram);
  }
  std::vector<int64_t> ids;
  auto out = runAll(*engine, all, ids);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(out[ids[i]], plain[i / 3]) << "request " << i;
  EXPECT_GT(engine->stats(ids[0])->spec_rows, 0);
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
}

TEST(LayerSkipTest, BadLayerCountsAreRefused) {
  OPEN_OR_SKIP(engine);
  auto refused = [&](GenerationRequest r) {
    auto id = engine->submit(std::move(r), {});
    return id.ok() ? std::string("accepted") : id.error().message;
  };
  EXPECT_EQ(refused(request("Hi", 4, {1, 1}, 0)),
            "--spec=layerskip:0: K must be 1 to 29 (the model has 30 layers; the draft runs fewer)");
  EXPECT_EQ(refused(request("Hi", 4, {1, 1}, 30)),
            "--spec=layerskip:30: K must be 1 to 29 (the model has 30 layers; the draft runs fewer)");
  EXPECT_EQ(refused(request("Hi", 4, {1, 1}, 4)),
            "--spec=layerskip:4: the artifact's draft entry runs 24 layers: compile it with kiln-compile "
            "--spec-layerskip 4");
  EXPECT_TRUE(engine->idle());
}

}  // namespace
}  // namespace kiln
