// The C API on the SmolLM2 artifact (the e2e fixture), through libkiln as a
// caller links it: errors come back as statuses with a message, polling
// sees what the callback saw, and cancelled, released or destroyed requests
// give their KV blocks back (the engine metrics).
#include "kiln/kiln.h"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/kiln.hpp"

namespace {

std::string artifactDir() {
  const char* dir = std::getenv("KILN_SMOLLM2_ARTIFACT");
  return dir ? dir : "(KILN_SMOLLM2_ARTIFACT unset: run this test through ctest)";
}

class CApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kiln_engine_options options;
    kiln_engine_options_init(&options);
    options.device = "cpu";
    options.threads = 2;
    engine_ = kiln_engine_create(artifactDir().c_str(), &options);
    if (engine_ == nullptr) {
      const char* require = std::getenv("KILN_REQUIRE_MODELS");
      if (require && std::string(require) == "1") ADD_FAILURE() << kiln_last_error();
      GTEST_SKIP() << "SmolLM2 artifact unavailable (run scripts/setup.sh): " << kiln_last_error();
    }
  }
  void TearDown() override { kiln_engine_destroy(engine_); }

  int64_t submit(const char* text, int max_tokens) {
    kiln_prompt prompt;
    kiln_prompt_init(&prompt);
    prompt.text = text;
    kiln_sampling_params params;
    kiln_sampling_params_init(&params);
    params.max_tokens = max_tokens;
    params.ignore_eos = 1;
    int64_t id = -1;
    EXPECT_EQ(kiln_submit(engine_, &prompt, &params, nullptr, nullptr, &id), KILN_OK) << kiln_last_error();
    return id;
  }

  kiln_engine_metrics metrics() {
    kiln_engine_metrics m;
    m.struct_size = sizeof(m);
    EXPECT_EQ(kiln_engine_metrics_get(engine_, &m), KILN_OK);
    return m;
  }

  kiln_engine* engine_ = nullptr;
};

TEST(CApi, BadModelPathFailsWithMessage) {
  kiln_engine* engine = kiln_engine_create("/nonexistent/artifact", nullptr);
  EXPECT_EQ(engine, nullptr);
  EXPECT_EQ(kiln_last_status(), KILN_ERROR_LOAD_FAILED);
  EXPECT_NE(std::string(kiln_last_error()).find("/nonexistent/artifact"), std::string::npos) << kiln_last_error();
  EXPECT_EQ(kiln_engine_create(nullptr, nullptr), nullptr);
  EXPECT_EQ(kiln_last_status(), KILN_ERROR_INVALID_ARGUMENT);
}

TEST(CApi, BadOptionsFail) {
  kiln_engine_options options;
  kiln_engine_options_init(&options);
  options.device = "tpu";
  EXPECT_EQ(kiln_engine_create(artifactDir().c_str(), &options), nullptr);
  EXPECT_EQ(kiln_last_status(), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kiln_last_error()).find("tpu"), std::string::npos);
  options.struct_size = 0;  // not initialized
  EXPECT_EQ(kiln_engine_create(artifactDir().c_str(), &options), nullptr);
  EXPECT_EQ(kiln_last_status(), KILN_ERROR_INVALID_ARGUMENT);
}

TEST(CApi, NullEngineIsAnError) {
  EXPECT_EQ(kiln_step(nullptr, nullptr), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kiln_cancel(nullptr, 0), KILN_ERROR_INVALID_ARGUMENT);
  kiln_engine_destroy(nullptr);  // a no-op
}

TEST_F(CApiTest, BadSamplingParamsAreRefusedWithTheField) {
  kiln_prompt prompt;
  kiln_prompt_init(&prompt);
  prompt.text = "Hello";
  struct Case {
    void (*set)(kiln_sampling_params&);
    const char* field;
  };
  const Case cases[] = {
      {[](kiln_sampling_params& p) { p.temperature = -0.5f; }, "temperature"},
      {[](kiln_sampling_params& p) { p.top_p = 1.5f; }, "top_p"},
      {[](kiln_sampling_params& p) { p.top_k = -1; }, "top_k"},
      {[](kiln_sampling_params& p) { p.max_tokens = 0; }, "max_tokens"},
  };
  for (const Case& c : cases) {
    kiln_sampling_params params;
    kiln_sampling_params_init(&params);
    c.set(params);
    int64_t id = -1;
    EXPECT_EQ(kiln_submit(engine_, &prompt, &params, nullptr, nullptr, &id), KILN_ERROR_INVALID_PARAMS) << c.field;
    EXPECT_NE(std::string(kiln_last_error()).find(c.field), std::string::npos) << kiln_last_error();
  }
  kiln_sampling_params params;
  kiln_sampling_params_init(&params);
  params.struct_size = 0;
  int64_t id = -1;
  EXPECT_EQ(kiln_submit(engine_, &prompt, &params, nullptr, nullptr, &id), KILN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(metrics().requests, 0);
  EXPECT_EQ(metrics().waiting, 0);
}

TEST_F(CApiTest, UnknownIdsAreNotFound) {
  EXPECT_EQ(kiln_cancel(engine_, 12345), KILN_ERROR_NOT_FOUND);
  EXPECT_NE(std::string(kiln_last_error()).find("12345"), std::string::npos);
  EXPECT_EQ(kiln_release(engine_, 12345), KILN_ERROR_NOT_FOUND);
  kiln_poll_result result;
  result.struct_size = sizeof(result);
  EXPECT_EQ(kiln_poll(engine_, 12345, &result), KILN_ERROR_NOT_FOUND);
  kiln_request_stats stats;
  stats.struct_size = sizeof(stats);
  EXPECT_EQ(kiln_request_stats_get(engine_, 12345, &stats), KILN_ERROR_NOT_FOUND);
}

struct Streamed {
  std::string text;
  std::vector<int32_t> tokens;
};

void collect(int64_t, int32_t token, const char* text, size_t len, void* user_data) {
  auto* out = static_cast<Streamed*>(user_data);
  if (token >= 0) out->tokens.push_back(token);
  out->text.append(text, len);
}

TEST_F(CApiTest, PollSeesWhatTheCallbackSaw) {
  kiln_prompt prompt;
  kiln_prompt_init(&prompt);
  prompt.text = "The capital of France is";
  kiln_sampling_params params;
  kiln_sampling_params_init(&params);
  params.max_tokens = 12;
  params.ignore_eos = 1;
  Streamed streamed;
  int64_t id = -1;
  ASSERT_EQ(kiln_submit(engine_, &prompt, &params, collect, &streamed, &id), KILN_OK) << kiln_last_error();

  Streamed polled;
  kiln_poll_result result{};
  result.struct_size = sizeof(result);
  for (int idle = 0; !idle;) {
    ASSERT_EQ(kiln_step(engine_, &idle), KILN_OK) << kiln_last_error();
    ASSERT_EQ(kiln_poll(engine_, id, &result), KILN_OK);
    polled.text.append(result.text, result.text_len);
    polled.tokens.insert(polled.tokens.end(), result.tokens, result.tokens + result.num_tokens);
  }
  EXPECT_EQ(result.finish, KILN_FINISH_LENGTH);
  EXPECT_EQ(polled.tokens.size(), 12u);
  EXPECT_EQ(polled.tokens, streamed.tokens);
  EXPECT_EQ(polled.text, streamed.text);
  EXPECT_FALSE(polled.text.empty());

  kiln_request_stats stats{};
  stats.struct_size = sizeof(stats);
  ASSERT_EQ(kiln_request_stats_get(engine_, id, &stats), KILN_OK);
  EXPECT_EQ(stats.generated_tokens, 12);
  EXPECT_GT(stats.prompt_tokens, 0);
  EXPECT_EQ(stats.finish, KILN_FINISH_LENGTH);
  EXPECT_STREQ(stats.error, "");
  EXPECT_EQ(kiln_release(engine_, id), KILN_OK);
  EXPECT_EQ(metrics().requests, 0);
}

// A callback that cancels its own request after two tokens, and tries the
// calls it may not make.
struct Reentry {
  kiln_engine* engine = nullptr;
  int tokens = 0;
  std::vector<kiln_status> refused;
};

void cancelAfterTwo(int64_t id, int32_t token, const char*, size_t, void* user_data) {
  auto* r = static_cast<Reentry*>(user_data);
  if (token < 0 || ++r->tokens != 2) return;
  r->refused.push_back(kiln_step(r->engine, nullptr));
  r->refused.push_back(kiln_release(r->engine, id));
  kiln_poll_result result{};
  result.struct_size = sizeof(result);
  r->refused.push_back(kiln_poll(r->engine, id, &result));
  r->refused.push_back(kiln_cancel(r->engine, id));  // allowed
}

TEST_F(CApiTest, CallbacksMayCancelButNotReenter) {
  kiln_prompt prompt;
  kiln_prompt_init(&prompt);
  prompt.text = "Once upon a time";
  kiln_sampling_params params;
  kiln_sampling_params_init(&params);
  params.max_tokens = 50;
  params.ignore_eos = 1;
  Reentry reentry;
  reentry.engine = engine_;
  int64_t id = -1;
  ASSERT_EQ(kiln_submit(engine_, &prompt, &params, cancelAfterTwo, &reentry, &id), KILN_OK);
  ASSERT_EQ(kiln_run_until_idle(engine_), KILN_OK) << kiln_last_error();
  EXPECT_EQ(reentry.refused, (std::vector<kiln_status>{KILN_ERROR_INVALID_ARGUMENT, KILN_ERROR_INVALID_ARGUMENT,
                                                        KILN_ERROR_INVALID_ARGUMENT, KILN_OK}));
  kiln_request_stats stats{};
  stats.struct_size = sizeof(stats);
  ASSERT_EQ(kiln_request_stats_get(engine_, id, &stats), KILN_OK);
  EXPECT_EQ(stats.finish, KILN_FINISH_CANCELLED);
  EXPECT_LT(stats.generated_tokens, 50);
  EXPECT_EQ(kiln_release(engine_, id), KILN_OK);
}

// logprobs: one per polled token, with top_n alternatives, most likely
// first; greedy, so the token is the first of them. (Their values against
// NumPy: test/server/serve_features_test.py.)
TEST_F(CApiTest, PollCarriesLogprobs) {
  kiln_prompt prompt;
  kiln_prompt_init(&prompt);
  prompt.text = "The capital of France is";
  kiln_sampling_params params;
  kiln_sampling_params_init(&params);
  EXPECT_EQ(params.logprobs, -1);
  params.max_tokens = 6;
  params.ignore_eos = 1;
  params.logprobs = 3;
  int64_t id = -1;
  ASSERT_EQ(kiln_submit(engine_, &prompt, &params, nullptr, nullptr, &id), KILN_OK) << kiln_last_error();
  ASSERT_EQ(kiln_run_until_idle(engine_), KILN_OK) << kiln_last_error();
  kiln_poll_result result{};
  result.struct_size = sizeof(result);
  ASSERT_EQ(kiln_poll(engine_, id, &result), KILN_OK);
  ASSERT_EQ(result.num_tokens, 6u);
  ASSERT_EQ(result.top_n, 3u);
  ASSERT_NE(result.token_logprobs, nullptr);
  for (size_t i = 0; i < result.num_tokens; ++i) {
    EXPECT_EQ(result.top_ids[i * 3], result.tokens[i]);
    EXPECT_EQ(result.top_logprobs[i * 3], result.token_logprobs[i]);
    EXPECT_LE(result.top_logprobs[i * 3 + 1], result.top_logprobs[i * 3]);
    EXPECT_LE(result.token_logprobs[i], 0.0f);
  }
  EXPECT_EQ(kiln_release(engine_, id), KILN_OK);
  params.logprobs = 21;
  EXPECT_EQ(kiln_submit(engine_, &prompt, &params, nullptr, nullptr, &id), KILN_ERROR_INVALID_PARAMS);
  EXPECT_NE(std::string(kiln_last_error()).find("logprobs"), std::string::npos);
}

// An older caller's struct: the fields it knows are written, the rest of its
// memory is not touched.
TEST_F(CApiTest, ShorterStructsFromOlderCallersAreHonoured) {
  struct {
    kiln_engine_metrics metrics;
    char guard[8];
  } old{};
  std::memset(old.guard, 0x5a, sizeof(old.guard));
  old.metrics.struct_size = offsetof(kiln_engine_metrics, running);
  ASSERT_EQ(kiln_engine_metrics_get(engine_, &old.metrics), KILN_OK);
  EXPECT_EQ(old.metrics.struct_size, offsetof(kiln_engine_metrics, running));
  EXPECT_EQ(old.metrics.running, 0);
  for (char c : old.guard) EXPECT_EQ(c, 0x5a);
}

TEST_F(CApiTest, CancelAndReleaseReturnTheKvBlocks) {
  const int64_t total = metrics().kv_blocks_total;
  ASSERT_GT(total, 0);
  int64_t a = submit("Once upon a time", 200);
  int64_t b = submit("The quick brown fox", 200);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(kiln_step(engine_, nullptr), KILN_OK) << kiln_last_error();
  EXPECT_EQ(metrics().running, 2);
  EXPECT_LT(metrics().kv_blocks_free + metrics().kv_blocks_cached, total);

  ASSERT_EQ(kiln_cancel(engine_, a), KILN_OK);
  ASSERT_EQ(kiln_release(engine_, b), KILN_OK);  // releases a running request
  ASSERT_EQ(kiln_run_until_idle(engine_), KILN_OK);
  kiln_poll_result result{};
  result.struct_size = sizeof(result);
  ASSERT_EQ(kiln_poll(engine_, a, &result), KILN_OK);
  EXPECT_EQ(result.finish, KILN_FINISH_CANCELLED);
  EXPECT_EQ(kiln_cancel(engine_, a), KILN_OK);  // an ended request: nothing to do
  ASSERT_EQ(kiln_release(engine_, a), KILN_OK);

  kiln_engine_metrics m = metrics();
  EXPECT_EQ(m.running, 0);
  EXPECT_EQ(m.waiting, 0);
  EXPECT_EQ(m.requests, 0);
  EXPECT_EQ(m.kv_blocks_free + m.kv_blocks_cached, total);
}

TEST_F(CApiTest, DestroyWithRequestsInFlight) {
  for (int i = 0; i < 4; ++i) submit("Tell me a long story about a dragon", 200);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(kiln_step(engine_, nullptr), KILN_OK) << kiln_last_error();
  EXPECT_GT(metrics().running + metrics().waiting, 0);
  kiln_engine_destroy(engine_);  // cancels them; ASan/valgrind builds see no leak
  engine_ = nullptr;
}

kiln::api::Prompt textPrompt(const char* text) {
  kiln::api::Prompt prompt;
  prompt.text = text;
  return prompt;
}

TEST_F(CApiTest, CppLayerGeneratesAndThrows) {
  kiln_engine_destroy(engine_);
  engine_ = nullptr;
  kiln::api::EngineOptions options;
  options.device = "cpu";
  options.threads = 2;
  kiln::api::Engine engine(artifactDir(), options);
  kiln::api::SamplingParams params;
  params.max_tokens = 8;
  params.ignore_eos = true;
  params.logprobs = 2;
  auto completions = engine.generate({textPrompt("The capital of France is"), textPrompt("1, 2, 3,")}, params);
  ASSERT_EQ(completions.size(), 2u);
  for (const auto& c : completions) {
    EXPECT_EQ(c.tokens.size(), 8u);
    EXPECT_EQ(c.finish, KILN_FINISH_LENGTH);
    EXPECT_FALSE(c.text.empty());
    ASSERT_EQ(c.logprobs.size(), 8u);
    EXPECT_EQ(c.logprobs[0].top.size(), 2u);
    EXPECT_EQ(c.logprobs[0].top[0].first, c.tokens[0]);  // greedy
  }
  params.logprobs = -1;
  params.temperature = -1;
  try {
    engine.generate({textPrompt("Hi")}, params);
    ADD_FAILURE() << "a negative temperature was accepted";
  } catch (const kiln::api::Error& e) {
    EXPECT_EQ(e.status(), KILN_ERROR_INVALID_PARAMS);
    EXPECT_NE(std::string(e.what()).find("temperature"), std::string::npos) << e.what();
  }
  EXPECT_EQ(engine.metrics().requests, 0);
  EXPECT_THROW(kiln::api::Engine("/nonexistent"), kiln::api::Error);
}

}  // namespace
