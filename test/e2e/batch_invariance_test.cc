// Batch invariance: a request's greedy tokens are the same whether it runs
// alone or among many others of different lengths (prefill chunks and
// decode tokens of other sequences sharing its forward calls).
//
// The model comes from the environment, so the same test runs on the CPU
// in CI (the SmolLM2 artifact) and on the GPU machine (scripts/gpu-check.sh
// part `serve`, a random Llama-3-8B in bf16):
//   KILN_SMOLLM2_ARTIFACT or KILN_INVARIANCE_ARTIFACT  the artifact
//   KILN_INVARIANCE_MODEL_SOURCE  weights elsewhere (optional)
//   KILN_INVARIANCE_DEVICE        cpu (default) or cuda
//   KILN_INVARIANCE_OTHERS        requests beside the probe (default 63)
//   KILN_INVARIANCE_TOKENS        generated tokens per request (default 16)
//   KILN_INVARIANCE_BATCH_INVARIANT=1  the CUDA backend's batch-invariant mode
//   KILN_INVARIANCE_REPORT_ONLY=1 print where the probe's tokens first differ
//                                 without failing (a measurement of a backend
//                                 run without the batch-invariant mode)
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/engine/engine.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kiln {
namespace {

std::string env(const char* name, const std::string& fallback = {}) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

std::unique_ptr<Engine> openEngine(int max_sequences, bool prefix_cache) {
  std::string artifact = env("KILN_INVARIANCE_ARTIFACT", env("KILN_SMOLLM2_ARTIFACT"));
  EXPECT_FALSE(artifact.empty()) << "set KILN_SMOLLM2_ARTIFACT or KILN_INVARIANCE_ARTIFACT (ctest sets the first)";
  EngineOptions options;
  options.progress = false;
  options.device = env("KILN_INVARIANCE_DEVICE", "cpu");
  options.model_source = env("KILN_INVARIANCE_MODEL_SOURCE");
  options.max_sequences = max_sequences;
  options.kv_cache_tokens = int64_t(max_sequences) * 512;
  options.prefix_cache = prefix_cache;
  options.cuda.batch_invariant = env("KILN_INVARIANCE_BATCH_INVARIANT") == "1";
  auto opened = Engine::open(artifact, options);
  EXPECT_TRUE(opened.ok()) << opened.error().message;
  return opened.ok() ? opened.take() : nullptr;
}

TEST(BatchInvarianceTest, GreedyTokensAloneEqualTokensAmongOthers) {
  const int others = std::atoi(env("KILN_INVARIANCE_OTHERS", "63").c_str());
  const int gen = std::atoi(env("KILN_INVARIANCE_TOKENS", "16").c_str());
  // Without the prefix cache: the probe's prompt is computed both times.
  std::unique_ptr<Engine> opened = openEngine(others + 1, /*prefix_cache=*/false);
  ASSERT_NE(opened, nullptr);
  Engine& engine = *opened;
  std::fprintf(stderr, "batch invariance on %s: 1 probe + %d others, %d tokens each\n",
               engine.backendName().c_str(), others, gen);

  const int32_t vocab = int32_t(engine.tokenizer().vocabSize());
  std::mt19937 rng(5);
  auto randomPrompt = [&](int length) {
    std::vector<int32_t> ids;
    // Ordinary tokens well inside the vocabulary (not special ones at its ends).
    for (int i = 0; i < length; ++i) ids.push_back(int32_t(1000 + rng() % uint32_t(std::max(1, vocab / 2 - 1000))));
    return ids;
  };
  const std::vector<int32_t> probe = randomPrompt(37);
  auto request = [&](std::vector<int32_t> prompt) {
    GenerationRequest r;
    r.prompt_tokens = std::move(prompt);
    r.sampling.max_tokens = gen;
    r.sampling.ignore_eos = true;
    return r;
  };
  std::vector<int32_t> alone, among;
  auto collect = [](std::vector<int32_t>& into) {
    return [&into](int64_t, int32_t token, std::string_view) {
      if (token >= 0) into.push_back(token);
    };
  };
  ASSERT_TRUE(engine.submit(request(probe), collect(alone)).ok());
  ASSERT_TRUE(engine.runUntilIdle().ok());
  ASSERT_EQ(int(alone.size()), gen);

  // The others first (they start their prefills in the probe's forward
  // calls), with lengths from 1 to 100 tokens.
  for (int i = 0; i < others; ++i)
    ASSERT_TRUE(engine.submit(request(randomPrompt(1 + int(rng() % 100))), {}).ok());
  ASSERT_TRUE(engine.submit(request(probe), collect(among)).ok());
  ASSERT_TRUE(engine.runUntilIdle().ok());
  size_t first_difference = 0;
  while (first_difference < alone.size() && first_difference < among.size() &&
         alone[first_difference] == among[first_difference])
    ++first_difference;
  std::fprintf(stderr, "batch invariance%s: %zu of %d tokens equal before the first difference\n",
               env("KILN_INVARIANCE_BATCH_INVARIANT") == "1" ? " (batch-invariant mode)" : "", first_difference, gen);
  if (env("KILN_INVARIANCE_REPORT_ONLY") == "1") {
    std::fprintf(stderr, "batch invariance: report only (KILN_INVARIANCE_REPORT_ONLY=1), not checked\n");
    return;
  }
  EXPECT_EQ(among, alone);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Greedy completions of one request share its prompt's blocks and copy the
// partly filled one on write: all n must agree token for token (a missed or
// wrong copy would give a completion other keys and values).
TEST(BatchInvarianceTest, ParallelGreedyCompletionsAgree) {
  std::unique_ptr<Engine> engine = openEngine(8, /*prefix_cache=*/true);
  ASSERT_NE(engine, nullptr);
  GenerationRequest r;
  for (int i = 0; i < 21; ++i) r.prompt_tokens.push_back(int32_t(1000 + 37 * i));  // 21: a partial block
  r.sampling.max_tokens = std::atoi(env("KILN_INVARIANCE_TOKENS", "16").c_str());
  r.sampling.ignore_eos = true;
  r.sampling.n = 4;
  std::map<int64_t, std::vector<int32_t>> tokens;
  auto id = engine->submit(r, [&](int64_t id, int32_t token, std::string_view) {
    if (token >= 0) tokens[id].push_back(token);
  });
  ASSERT_TRUE(id.ok()) << id.error().message;
  ASSERT_TRUE(engine->runUntilIdle().ok());
  ASSERT_EQ(int(tokens[*id].size()), r.sampling.max_tokens);
  for (int c = 1; c < 4; ++c) EXPECT_EQ(tokens[*id + c], tokens[*id]) << "completion " << c;
}

}  // namespace
}  // namespace kiln
