// The engine on the real SmolLM2 artifact (compiled by the ctest fixture):
// continuous batching must not change any request's tokens, a cancelled or
// failing request must not disturb the others, and bad requests are refused
// at submit with the engine still serving.
#include "runtime/engine/engine.h"

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/tokenizer/tokenizer.h"

namespace kiln {
namespace {

std::string artifactDir() {
  const char* dir = std::getenv("KILN_SMOLLM2_ARTIFACT");
  return dir ? dir : "(KILN_SMOLLM2_ARTIFACT unset: run this test through ctest)";
}

class EngineTest : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> open(EngineOptions options = {}) {
    options.progress = false;
    options.threads = 2;
    auto engine = Engine::open(artifactDir(), options);
    if (!engine.ok()) {
      const char* require = std::getenv("KILN_REQUIRE_MODELS");
      if (require && std::string(require) == "1") {
        ADD_FAILURE() << "KILN_REQUIRE_MODELS=1 but the engine cannot open "
                      << artifactDir() << ": " << engine.error().message;
      }
      return nullptr;
    }
    return engine.take();
  }

  static GenerationRequest greedy(const std::string& prompt, int max_tokens) {
    GenerationRequest r;
    r.prompt = prompt;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    return r;
  }
};

#define OPEN_OR_SKIP(engine, ...)                                              \
  auto engine = open(__VA_ARGS__);                                             \
  if (!engine) GTEST_SKIP() << "SmolLM2 artifact unavailable (run scripts/setup.sh)"

// Runs requests to completion, collecting each one's tokens.
std::map<int64_t, std::vector<int32_t>> runAll(Engine& engine,
                                               const std::vector<GenerationRequest>& requests,
                                               std::vector<int64_t>* ids_out = nullptr) {
  std::map<int64_t, std::vector<int32_t>> tokens;
  for (const GenerationRequest& r : requests) {
    auto id = engine.submit(r, [&](int64_t id, int32_t token, std::string_view) {
      if (token >= 0) tokens[id].push_back(token);
    });
    EXPECT_TRUE(id.ok()) << (id.ok() ? "" : id.error().message);
    if (ids_out && id.ok()) ids_out->push_back(*id);
  }
  Status status = engine.runUntilIdle();
  EXPECT_TRUE(status.ok()) << (status.ok() ? "" : status.error().message);
  return tokens;
}

TEST_F(EngineTest, BatchedRequestsGiveTheirSoloTokens) {
  OPEN_OR_SKIP(engine);
  const std::vector<std::string> prompts = {"Once upon a time, in a small village,",
                                            "The three primary colors are",
                                            "def fibonacci(n):"};
  std::vector<std::vector<int32_t>> solo;
  for (const std::string& p : prompts) {
    std::vector<int64_t> ids;
    auto out = runAll(*engine, {greedy(p, 12)}, &ids);
    solo.push_back(out[ids[0]]);
    ASSERT_EQ(solo.back().size(), 12u);
  }
  // All three at once: prefill chunks and decode tokens share forward calls.
  std::vector<GenerationRequest> together;
  for (const std::string& p : prompts) together.push_back(greedy(p, 12));
  std::vector<int64_t> ids;
  auto batched = runAll(*engine, together, &ids);
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(batched[ids[i]], solo[i]) << "request " << i << " changed when batched";
}

TEST_F(EngineTest, SmallTokenBudgetChunksPrefillWithoutChangingTokens) {
  OPEN_OR_SKIP(engine);
  std::vector<int64_t> ids;
  auto whole = runAll(*engine, {greedy("Once upon a time, in a small village, there lived", 8)}, &ids);
  EngineOptions small;
  small.max_batch_tokens = 4;  // prefill in chunks of at most 4 tokens
  OPEN_OR_SKIP(chunked, small);
  std::vector<int64_t> chunked_ids;
  auto parts = runAll(*chunked, {greedy("Once upon a time, in a small village, there lived", 8)},
                      &chunked_ids);
  EXPECT_EQ(parts[chunked_ids[0]], whole[ids[0]]);
}

// n completions share the prompt's blocks (one prefill, copy on write
// where they diverge) and each equals a request of its own with its seed.
TEST_F(EngineTest, ParallelSamplesEqualSoloRequestsWithTheirSeeds) {
  OPEN_OR_SKIP(engine);
  GenerationRequest sampled = greedy("Once upon a time, in a small village,", 10);
  sampled.sampling.temperature = 0.9f;
  sampled.sampling.top_p = 0.95f;
  sampled.sampling.seed = 7;
  std::vector<std::vector<int32_t>> solo;
  for (int c = 0; c < 3; ++c) {
    GenerationRequest one = sampled;
    one.sampling.seed = 7 + uint64_t(c);
    std::vector<int64_t> ids;
    solo.push_back(runAll(*engine, {one}, &ids)[ids[0]]);
  }
  EXPECT_FALSE(solo[0] == solo[1] && solo[1] == solo[2]) << "the seeds gave one sequence: the test shows nothing";
  sampled.sampling.n = 3;
  std::vector<int64_t> ids;
  auto together = runAll(*engine, {sampled}, &ids);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(together[ids[0] + c], solo[size_t(c)]) << "completion " << c;
    EXPECT_EQ(engine->stats(ids[0] + c)->finish, FinishReason::kLength);
  }
}

// A pool too small for the batch: sequences are preempted and recomputed,
// and every output is still its solo output.
TEST_F(EngineTest, PreemptionLeavesEveryOutputUnchanged) {
  const std::vector<std::string> prompts = {"The three primary colors are", "def fibonacci(n):",
                                            "Once upon a time", "The capital of France is"};
  OPEN_OR_SKIP(roomy);
  std::vector<std::vector<int32_t>> solo;
  for (const std::string& p : prompts) {
    std::vector<int64_t> ids;
    solo.push_back(runAll(*roomy, {greedy(p, 30)}, &ids)[ids[0]]);
  }
  EngineOptions tight;
  tight.kv_cache_tokens = 96;  // 6 blocks of 16; each request needs 3 alone
  OPEN_OR_SKIP(engine, tight);
  std::vector<GenerationRequest> all;
  for (const std::string& p : prompts) all.push_back(greedy(p, 30));
  std::vector<int64_t> ids;
  auto out = runAll(*engine, all, &ids);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(engine->stats(ids[i])->finish, FinishReason::kLength) << engine->stats(ids[i])->error;
    EXPECT_EQ(out[ids[i]], solo[i]) << "request " << i;
  }
  const EngineMetrics m = engine->metrics();
  EXPECT_GT(m.preemptions, 0);
  EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
}

// The second of two requests with the same long prompt skips the prefill
// of its cached blocks and gives the same tokens; with the cache off nothing
// is reused.
TEST_F(EngineTest, PrefixCacheSkipsCachedPrefillAndKeepsTokens) {
  const std::string prompt =
      "The quick brown fox jumps over the lazy dog while the compiler lowers every attention block into one "
      "fused kernel, and the runtime pages the cache so that many requests share one pool of blocks on the "
      "card.";
  for (bool cache : {true, false}) {
    EngineOptions options;
    options.prefix_cache = cache;
    OPEN_OR_SKIP(engine, options);
    std::vector<int64_t> ids;
    auto first = runAll(*engine, {greedy(prompt, 8)}, &ids);
    auto second = runAll(*engine, {greedy(prompt, 8)}, &ids);
    EXPECT_EQ(second[ids[1]], first[ids[0]]);
    const int64_t prompt_tokens = engine->stats(ids[1])->prompt_tokens;
    ASSERT_GT(prompt_tokens, 32);
    const int64_t cached = engine->stats(ids[1])->cached_prompt_tokens;
    if (cache) {
      EXPECT_EQ(cached, (prompt_tokens - 1) / 16 * 16);
      EXPECT_GT(engine->metrics().prefixHitRate(), 0.0);
    } else {
      EXPECT_EQ(cached, 0);
      EXPECT_EQ(engine->metrics().kv_blocks_cached, 0);
    }
  }
}

TEST_F(EngineTest, CancelStopsOneRequestOnly) {
  OPEN_OR_SKIP(engine);
  std::vector<int64_t> solo_ids;
  auto solo = runAll(*engine, {greedy("The three primary colors are", 10)}, &solo_ids);

  std::map<int64_t, std::vector<int32_t>> tokens;
  auto collect = [&](int64_t id, int32_t token, std::string_view) {
    if (token >= 0) tokens[id].push_back(token);
  };
  auto keep = engine->submit(greedy("The three primary colors are", 10), collect);
  auto drop = engine->submit(greedy("Once upon a time", 50), collect);
  ASSERT_TRUE(keep.ok() && drop.ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(engine->step().ok());
  engine->cancel(*drop);
  ASSERT_TRUE(engine->runUntilIdle().ok());
  EXPECT_EQ(engine->stats(*drop)->finish, FinishReason::kCancelled);
  EXPECT_LT(tokens[*drop].size(), 50u);
  EXPECT_EQ(engine->stats(*keep)->finish, FinishReason::kLength);
  EXPECT_EQ(tokens[*keep], solo[solo_ids[0]]);
}

TEST_F(EngineTest, RequestLargerThanThePoolIsRefusedAtSubmitWithItsSizes) {
  EngineOptions tiny;
  tiny.kv_cache_tokens = 32;  // two 16-token pages
  OPEN_OR_SKIP(engine, tiny);
  auto refused = engine->submit(greedy("Once upon a time", 64), {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("the whole KV pool holds 32 (2 blocks of 16)"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("+ 64 max_tokens"), std::string::npos) << refused.error().message;
  // The engine still serves a request that fits.
  std::vector<int64_t> ok_ids;
  auto out = runAll(*engine, {greedy("Hi", 4)}, &ok_ids);
  EXPECT_EQ(engine->stats(ok_ids[0])->finish, FinishReason::kLength);
  EXPECT_EQ(out[ok_ids[0]].size(), 4u);
}

TEST_F(EngineTest, BadRequestsAreRefusedAtSubmit) {
  OPEN_OR_SKIP(engine);
  GenerationRequest bad = greedy("hello", 4);
  bad.sampling.temperature = -1;
  auto id = engine->submit(bad, {});
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.error().message, "temperature -1 is invalid: expected >= 0");

  GenerationRequest out_of_vocab = greedy("", 4);
  out_of_vocab.prompt_tokens = {1, 2, 999999};
  auto id2 = engine->submit(out_of_vocab, {});
  ASSERT_FALSE(id2.ok());
  EXPECT_NE(id2.error().message.find("prompt token id 999999 is out of range"), std::string::npos);

  GenerationRequest empty = greedy("", 4);
  auto id3 = engine->submit(empty, {});
  ASSERT_FALSE(id3.ok());
  EXPECT_EQ(id3.error().message, "the prompt is empty: expected at least one token");
  EXPECT_TRUE(engine->idle());

  std::vector<int64_t> ids;
  auto good = runAll(*engine, {greedy("The three primary colors are", 3)}, &ids);
  EXPECT_EQ(good[ids[0]].size(), 3u);
}

TEST_F(EngineTest, LongPromptIsAnErrorUnlessTruncationIsAsked) {
  EngineOptions short_context;
  short_context.max_context = 16;
  OPEN_OR_SKIP(engine, short_context);
  GenerationRequest r = greedy("", 4);
  for (int i = 0; i < 20; ++i) r.prompt_tokens.push_back(int32_t(100 + i));
  auto refused = engine->submit(r, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message,
            "the prompt has 20 tokens but the context holds 15 (model limit 16): shorten it, or "
            "ask for truncation (--truncate)");

  // Truncation keeps the prompt's last 15 tokens: the same tokens as
  // submitting those 15 directly.
  r.truncate_prompt = true;
  std::vector<int64_t> ids;
  auto truncated = runAll(*engine, {r}, &ids);
  EXPECT_EQ(engine->stats(ids[0])->prompt_tokens, 15);
  GenerationRequest tail = greedy("", 4);
  tail.prompt_tokens.assign(r.prompt_tokens.end() - 15, r.prompt_tokens.end());
  tail.sampling.max_tokens = 1;  // the context is full after one more token
  std::vector<int64_t> tail_ids;
  auto direct = runAll(*engine, {tail}, &tail_ids);
  ASSERT_FALSE(truncated[ids[0]].empty());
  EXPECT_EQ(truncated[ids[0]].front(), direct[tail_ids[0]].front());
  // The context limit ends generation: 15 prompt tokens + 1 generated = 16.
  EXPECT_EQ(engine->stats(ids[0])->finish, FinishReason::kLength);
  EXPECT_EQ(engine->stats(ids[0])->generated_tokens, 1);
}

TEST_F(EngineTest, StatsCountTokensAndStopStringsEndRequests) {
  OPEN_OR_SKIP(engine);
  GenerationRequest r = greedy("Once upon a time, in a small village,", 40);
  r.sampling.stop_strings = {"wizard"};
  std::string text;
  auto id = engine->submit(r, [&](int64_t, int32_t, std::string_view piece) { text += piece; });
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(engine->runUntilIdle().ok());
  const RequestStats* stats = engine->stats(*id);
  EXPECT_EQ(stats->prompt_tokens, 10);
  EXPECT_EQ(stats->finish, FinishReason::kStop);
  // llama.cpp's continuation reads " there was a wise old wizard named ...":
  // the stop string ends the text right before it and is not streamed.
  EXPECT_EQ(text, " there was a wise old ");
  EXPECT_LT(stats->generated_tokens, 40);
}

}  // namespace
}  // namespace kiln
