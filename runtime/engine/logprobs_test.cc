// Log probabilities through the engine on the SmolLM2 artifact (CPU): one
// per generated token, before its token callback; asking for them changes
// no token; they are the raw distribution (a sampled request's first token
// reports what a greedy request's does); forks of n > 1 get theirs; with
// speculation they are refused. Their values against NumPy over the CPU
// executor's logits: test/server/serve_features_test.py.
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/engine/engine.h"

namespace kiln {
namespace {

std::unique_ptr<Engine> openSmolLm2() {
  const char* dir = std::getenv("KILN_SMOLLM2_ARTIFACT");
  EngineOptions options;
  options.progress = false;
  options.threads = 2;
  options.device = "cpu";
  auto engine = Engine::open(dir ? dir : "(KILN_SMOLLM2_ARTIFACT unset)", options);
  return engine.ok() ? engine.take() : nullptr;
}

struct Completion {
  std::vector<int32_t> tokens;
  std::vector<sampling::TokenLogprobs> logprobs;
  bool logprobs_came_first = true;  // each token's logprobs before its callback
};

std::map<int64_t, Completion> run(Engine& engine, const GenerationRequest& request) {
  std::map<int64_t, Completion> out;
  auto id = engine.submit(
      request,
      [&](int64_t id, int32_t token, std::string_view) {
        if (token < 0) return;
        Completion& c = out[id];
        c.tokens.push_back(token);
        if (request.sampling.logprobs >= 0 &&
            (c.logprobs.size() != c.tokens.size() || c.logprobs.back().token != token))
          c.logprobs_came_first = false;
      },
      [&](int64_t id, const sampling::TokenLogprobs& lp) { out[id].logprobs.push_back(lp); });
  EXPECT_TRUE(id.ok()) << (id.ok() ? "" : id.error().message);
  EXPECT_TRUE(engine.runUntilIdle().ok());
  return out;
}

GenerationRequest request(int logprobs) {
  GenerationRequest r;
  r.prompt = "The capital of France is";
  r.sampling.max_tokens = 6;
  r.sampling.ignore_eos = true;
  r.sampling.logprobs = logprobs;
  return r;
}

#define OPEN_OR_SKIP(engine)   \
  auto engine = openSmolLm2(); \
  if (!engine) GTEST_SKIP() << "SmolLM2 artifact unavailable (run scripts/setup.sh)"

TEST(EngineLogprobsTest, OnePerTokenAndNoTokenChanges) {
  OPEN_OR_SKIP(engine);
  const auto plain = run(*engine, request(-1));
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_TRUE(plain.begin()->second.logprobs.empty());
  const auto with = run(*engine, request(4));
  ASSERT_EQ(with.size(), 1u);
  const Completion& c = with.begin()->second;
  EXPECT_EQ(c.tokens, plain.begin()->second.tokens);
  ASSERT_EQ(c.logprobs.size(), c.tokens.size());
  EXPECT_TRUE(c.logprobs_came_first);
  for (const sampling::TokenLogprobs& lp : c.logprobs) {
    ASSERT_EQ(lp.top.size(), 4u);
    EXPECT_EQ(lp.top[0].first, lp.token);  // greedy: the most likely
    EXPECT_EQ(lp.top[0].second, lp.logprob);
    double mass = 0;
    for (size_t i = 0; i < lp.top.size(); ++i) {
      EXPECT_LE(lp.top[i].second, 0.0f);
      if (i > 0) EXPECT_LE(lp.top[i].second, lp.top[i - 1].second);
      mass += std::exp(double(lp.top[i].second));
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
  }
}

TEST(EngineLogprobsTest, TheRawDistributionWhateverTheSampling) {
  OPEN_OR_SKIP(engine);
  const Completion greedy = run(*engine, request(5)).begin()->second;
  GenerationRequest sampled = request(5);
  sampled.sampling.temperature = 1.8f;
  sampled.sampling.top_k = 3;
  sampled.sampling.seed = 7;
  sampled.sampling.n = 2;
  const auto forks = run(*engine, sampled);
  ASSERT_EQ(forks.size(), 2u);
  for (const auto& [id, c] : forks) {
    ASSERT_EQ(c.logprobs.size(), c.tokens.size()) << "completion " << id;
    // The first token comes from the same logits row as greedy's.
    ASSERT_EQ(c.logprobs[0].top.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(c.logprobs[0].top[i].first, greedy.logprobs[0].top[i].first);
      EXPECT_NEAR(c.logprobs[0].top[i].second, greedy.logprobs[0].top[i].second, 1e-4);
    }
    // top_k 3 (no penalty moving logits first): every drawn token is among
    // the 3 most likely of the raw distribution.
    for (const sampling::TokenLogprobs& lp : c.logprobs) {
      EXPECT_GE(lp.logprob, lp.top[2].second);
      EXPECT_TRUE(std::isfinite(lp.logprob));
    }
  }
}

TEST(EngineLogprobsTest, SpeculationWithLogprobsIsRefused) {
  OPEN_OR_SKIP(engine);
  GenerationRequest r = request(2);
  r.speculation.method = SpecMethod::kNgram;
  r.speculation.tree = spec::TreeShape::chain(2);
  auto id = engine->submit(r, {});
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.error().message.find("logprobs"), std::string::npos) << id.error().message;
}

}  // namespace
}  // namespace kiln
