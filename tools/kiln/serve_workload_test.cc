#include "tools/kiln/serve_workload.h"

#include <set>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kiln {
namespace {

TEST(ServeWorkloadTest, TheSameSeedDrawsTheSameStream) {
  ServeRng a(7), b(7), c(8);
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next();
    EXPECT_EQ(x, b.next());
    EXPECT_NE(x, c.next());
  }
  // Forks are independent of each other and of the parent's later draws.
  ServeRng root(7);
  EXPECT_EQ(root.fork(1).next(), ServeRng(7).fork(1).next());
  EXPECT_NE(root.fork(1).next(), root.fork(2).next());
  // No fork replays another's stream from a later draw (the warm-up's
  // prompts, fork 1000, must not be the measured ones, fork 0).
  for (uint64_t seed : {0ull, 7ull}) {
    ServeRng measured = ServeRng(seed).fork(0);
    std::set<uint64_t> draws;
    for (int i = 0; i < 100000; ++i) draws.insert(measured.next());
    ServeRng warm = ServeRng(seed).fork(1000);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(draws.count(warm.next()), 0u) << "seed " << seed << " draw " << i;
  }
}

TEST(ServeWorkloadTest, FixedLengthsAreTheMean) {
  ServeRng rng(1);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(drawLength(rng, 64, /*lognormal=*/false, 1000), 64);
  EXPECT_EQ(drawLength(rng, 64, false, 50), 50);  // clamped to max
}

TEST(ServeWorkloadTest, LognormalLengthsHaveTheMeanAndSpread) {
  ServeRng rng(3);
  std::vector<double> lengths;
  for (int i = 0; i < 20000; ++i) lengths.push_back(double(drawLength(rng, 1000, /*lognormal=*/true, 1 << 30)));
  const double mean = std::accumulate(lengths.begin(), lengths.end(), 0.0) / double(lengths.size());
  EXPECT_NEAR(mean, 1000, 15);
  // exp(mu) with mu = ln(1000) - sigma^2 / 2: the median is 1000 * e^-0.125 = 882.
  EXPECT_NEAR(percentile(lengths, 50), 882, 15);
  // About 68% within one sigma of the log: [0.54, 1.46] x the mean.
  const auto within = std::count_if(lengths.begin(), lengths.end(), [](double l) { return l >= 535 && l <= 1455; });
  EXPECT_NEAR(double(within) / double(lengths.size()), 0.68, 0.02);
}

TEST(ServeWorkloadTest, LognormalLengthsAreClamped) {
  ServeRng rng(5);
  for (int i = 0; i < 1000; ++i) {
    const int64_t l = drawLength(rng, 2, /*lognormal=*/true, 3);
    EXPECT_GE(l, 1);
    EXPECT_LE(l, 3);
  }
}

TEST(ServeWorkloadTest, TokensComeFromTheVocabulary) {
  ServeRng rng(9);
  const int32_t vocabulary[] = {5, 17, 99};
  const std::vector<int32_t> ids = drawTokens(rng, vocabulary, 300);
  ASSERT_EQ(ids.size(), 300u);
  for (int32_t v : vocabulary) EXPECT_GT(std::count(ids.begin(), ids.end(), v), 50);
  EXPECT_EQ(std::count_if(ids.begin(), ids.end(), [](int32_t id) { return id != 5 && id != 17 && id != 99; }), 0);
}

TEST(ServeWorkloadTest, PoissonArrivalsAtTheRate) {
  ServeRng rng(11);
  const std::vector<double> t = poissonArrivals(rng, 20000, 4.0);
  EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
  EXPECT_GT(t.front(), 0);
  EXPECT_NEAR(t.back() / double(t.size()), 0.25, 0.01);  // mean gap 1 / rate
}

TEST(ServeWorkloadTest, PercentilesInterpolate) {
  EXPECT_EQ(percentile({}, 50), 0);
  EXPECT_EQ(percentile({4}, 99), 4);
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4, 5}, 100), 5);
  EXPECT_DOUBLE_EQ(percentile({0, 10}, 99), 9.9);
}

}  // namespace
}  // namespace kiln
