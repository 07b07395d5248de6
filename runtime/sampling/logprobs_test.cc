// tokenLogprobs against log-softmax values worked out by hand (the
// end-to-end check against NumPy over real logits is
// test/server/logprobs_test.py).
#include "runtime/sampling/logprobs.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace kiln::sampling {
namespace {

TEST(LogprobsTest, LogSoftmaxAndTopN) {
  // log-softmax of [0, ln 2, ln 3, ln 2]: log([1, 2, 3, 2] / 8).
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(2.0f)};
  TokenLogprobs lp = tokenLogprobs(logits, 1, 3);
  EXPECT_EQ(lp.token, 1);
  EXPECT_NEAR(lp.logprob, std::log(2.0 / 8), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 2);
  EXPECT_NEAR(lp.top[0].second, std::log(3.0 / 8), 1e-6);
  EXPECT_EQ(lp.top[1].first, 1);  // a tie: the lower id first
  EXPECT_EQ(lp.top[2].first, 3);
  EXPECT_NEAR(lp.top[2].second, std::log(2.0 / 8), 1e-6);
  EXPECT_TRUE(tokenLogprobs(logits, 0, 0).top.empty());
  EXPECT_EQ(tokenLogprobs(logits, 0, 20).top.size(), 4u);  // at most the vocabulary
}

TEST(LogprobsTest, LargeLogitsDoNotOverflow) {
  const std::vector<float> logits = {1000.0f, 1000.0f};
  EXPECT_NEAR(tokenLogprobs(logits, 0, 0).logprob, std::log(0.5), 1e-6);
}

TEST(LogprobsTest, NanAndMinusInfinityAreImpossible) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {std::nanf(""), 1.0f, -inf, 1.0f};
  TokenLogprobs lp = tokenLogprobs(logits, 0, 4);
  EXPECT_EQ(lp.logprob, -inf);
  EXPECT_NEAR(tokenLogprobs(logits, 3, 0).logprob, std::log(0.5), 1e-6);
  ASSERT_EQ(lp.top.size(), 4u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].second, -inf);
}

}  // namespace
}  // namespace kiln::sampling
