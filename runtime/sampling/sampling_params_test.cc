#include "runtime/sampling/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

namespace kiln::sampling {
namespace {

std::string errorOf(const SamplingParams& p) {
  Status s = p.validate();
  return s.ok() ? "ok" : s.error().message;
}

TEST(SamplingParamsTest, DefaultsAreValid) { EXPECT_EQ(errorOf(SamplingParams{}), "ok"); }

TEST(SamplingParamsTest, ErrorsNameFieldValueAndExpectation) {
  struct Case {
    std::function<void(SamplingParams&)> set;
    std::string message;
  };
  const Case cases[] = {
      {[](auto& p) { p.temperature = -0.5f; }, "temperature -0.5 is invalid: expected >= 0"},
      {[](auto& p) { p.temperature = NAN; }, "temperature nan is invalid: expected >= 0"},
      {[](auto& p) { p.top_p = 1.5f; }, "top_p 1.5 is invalid: expected a value in (0, 1]"},
      {[](auto& p) { p.top_p = 0.0f; }, "top_p 0 is invalid: expected a value in (0, 1]"},
      {[](auto& p) { p.top_k = -1; }, "top_k -1 is invalid: expected >= 0 (0 disables it)"},
      {[](auto& p) { p.min_p = 1.25f; }, "min_p 1.25 is invalid: expected a value in [0, 1]"},
      {[](auto& p) { p.min_p = -0.1f; }, "min_p -0.1 is invalid: expected a value in [0, 1]"},
      {[](auto& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty 0 is invalid: expected > 0"},
      {[](auto& p) { p.frequency_penalty = 3.0f; }, "frequency_penalty 3 is invalid: expected a value in [-2, 2]"},
      {[](auto& p) { p.presence_penalty = -2.5f; }, "presence_penalty -2.5 is invalid: expected a value in [-2, 2]"},
      {[](auto& p) { p.max_tokens = 0; }, "max_tokens 0 is invalid: expected > 0"},
      {[](auto& p) { p.n = 0; }, "n 0 is invalid: expected 1 <= n <= 128"},
      {[](auto& p) { p.n = 129; }, "n 129 is invalid: expected 1 <= n <= 128"},
      {[](auto& p) { p.stop_strings = {"a", ""}; }, "stop_strings[1] is invalid: expected a non-empty string"},
      {[](auto& p) { p.stop_token_ids = {-4}; }, "stop_token_ids[0] = -4 is invalid: expected >= 0"},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.set(p);
    EXPECT_EQ(errorOf(p), c.message);
  }
}

TEST(SamplingParamsTest, StopTokens) {
  SamplingParams p;
  p.stop_token_ids = {7};
  const int32_t eos[] = {2};
  EXPECT_TRUE(p.isStopToken(7, eos));
  EXPECT_TRUE(p.isStopToken(2, eos));
  EXPECT_FALSE(p.isStopToken(3, eos));
  p.ignore_eos = true;
  EXPECT_FALSE(p.isStopToken(2, eos));
  EXPECT_TRUE(p.isStopToken(7, eos));
}

}  // namespace
}  // namespace kiln::sampling
