// A Medusa draft head (runtime/spec/draft_head.h) on the real SmolLM2
// artifact with a verify entry (the ctest fixture): a head of random
// weights drafts tokens the target mostly rejects, and greedy output is
// still token for token the output without speculation, chain and tree,
// alone and batched; drafts were verified. A head of another hidden size,
// or a malformed config, is refused when the engine opens.
#include "runtime/engine/engine.h"

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/engine/spec_test_support.h"
#include "runtime/spec/testing/draft_head_writer.h"

namespace kiln {
namespace {

using namespace spec_testing;

std::string writeHead(const std::string& name, int64_t hidden, int64_t heads, float scale, unsigned seed,
                      const std::string& config = "") {
  std::string dir = spec::testing::writeDraftHead(name, hidden, heads, scale, seed, config);
  EXPECT_FALSE(dir.empty()) << "could not write the head " << name;
  return dir;
}

Result<std::unique_ptr<Engine>> open(const std::string& head) {
  EngineOptions options;
  options.progress = false;
  options.threads = 2;
  options.device = "cpu";
  options.draft_head = head;
  return Engine::open(artifactDir(), options);
}

GenerationRequest request(const std::string& prompt, int max_tokens, std::vector<int64_t> widths = {}) {
  return greedyRequest(prompt, max_tokens, SpecMethod::kDraftHead, std::move(widths));
}

const std::vector<std::string> kPrompts = {"The three primary colors are", "def fibonacci(n):"};

TEST(DraftHeadTest, RandomHeadKeepsTheGreedyTokens) {
  const std::string head = writeHead("random", 576, 4, 0.05f, 7);
  auto opened = open(head);
  if (!opened.ok()) {
    const char* require = std::getenv("KILN_REQUIRE_MODELS");
    if (require && std::string(require) == "1") FAIL() << opened.error().message;
    GTEST_SKIP() << "SmolLM2 spec artifact unavailable: " << opened.error().message;
  }
  Engine& engine = **opened;
  std::vector<std::vector<int32_t>> plain;
  for (const std::string& p : kPrompts) {
    std::vector<int64_t> ids;
    plain.push_back(runAll(engine, {request(p, 24)}, ids)[ids[0]]);
  }
  for (const std::vector<int64_t>& widths : {std::vector<int64_t>{1, 1, 1, 1}, std::vector<int64_t>{2, 2, 1}}) {
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      std::vector<int64_t> ids;
      auto out = runAll(engine, {request(kPrompts[i], 24, widths)}, ids);
      EXPECT_EQ(out[ids[0]], plain[i]) << "prompt " << i << " tree of depth " << widths.size();
      const RequestStats& stats = *engine.stats(ids[0]);
      EXPECT_GT(stats.spec_rows, 0) << "prompt " << i;
      EXPECT_GT(stats.spec_drafted_tokens, 0) << "prompt " << i;
    }
  }
  // Batched: head, plain and n-gram rows in one step.
  std::vector<GenerationRequest> all;
  for (const std::string& p : kPrompts) {
    all.push_back(request(p, 24, {1, 1, 1}));
    all.push_back(request(p, 24));
    GenerationRequest ngram = request(p, 24, {1, 1, 1, 1});
    ngram.speculation.method = SpecMethod::kNgram;
    all.push_back(ngram);
  }
  std::vector<int64_t> ids;
  auto out = runAll(engine, all, ids);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(out[ids[i]], plain[i / 3]) << "request " << i;
  EXPECT_GT(engine.stats(ids[0])->spec_drafted_tokens, 0);
  const EngineMetrics m = engine.metrics();
  EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
}

TEST(DraftHeadTest, BadHeadsAreRefused) {
  if (!std::getenv("KILN_SMOLLM2_SPEC_ARTIFACT")) GTEST_SKIP() << "KILN_SMOLLM2_SPEC_ARTIFACT unset";
  const std::string narrow = writeHead("narrow", 64, 2, 0.05f, 1);
  auto opened = open(narrow);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().message,
            "draft head " + narrow +
                ": its hidden size is 64, the target's 576: the head reads the target's hidden states");
  const std::string eagle = writeHead("kind", 576, 1, 0.05f, 1, "{\"kind\": \"eagle\", \"hidden_size\": 576}");
  opened = open(eagle);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().message,
            "draft head " + eagle + "/config.json: kind is 'eagle', expected \"medusa\"");
  const std::string no_heads = writeHead("noheads", 576, 1, 0.05f, 1, "{\"kind\": \"medusa\", \"hidden_size\": 576}");
  opened = open(no_heads);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().message,
            "draft head " + no_heads + "/config.json: expected integer fields hidden_size and heads");
  // A request for the method on an engine without a head.
  auto plain = open("");
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  auto id = (*plain)->submit(request("Hi", 4, {1, 1}), {});
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.error().message,
            "speculation by a draft head: this engine has none (EngineOptions::draft_head; kiln: --spec=head:PATH)");
}

}  // namespace
}  // namespace kiln
