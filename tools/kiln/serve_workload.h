// The requests of `kiln bench serve`, drawn from one fixed-seed generator so
// that a run, a rerun and the peer see the same token ids and lengths.
//
// Prompts are token ids drawn uniformly from the vocabulary's normal tokens
// (TokenType::kNormal: no control, user-defined, unknown, unused or byte
// tokens). Random ids rather than slices of one English text: no two
// prompts share a block-aligned prefix by accident, so every prefix-cache
// hit a run reports is one its workload's shape put there.
//
// Lengths are either exactly the mean, or lognormal: exp(N(mu, sigma)) with
// sigma = kLognormalSigma and mu = ln(mean) - sigma^2 / 2, so their mean is
// the given mean (the median is 0.88 x mean; about 68% of lengths lie in
// [0.54, 1.46] x mean), rounded and clamped to [1, max].
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kiln {

inline constexpr double kLognormalSigma = 0.5;

// SplitMix64: a small generator with the same stream on every platform
// (std::lognormal_distribution's algorithm is the library's choice).
class ServeRng {
 public:
  explicit ServeRng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();  // in (0, 1)
  double normal();   // N(0, 1), Box-Muller
  // An independent stream for part `index` of the workload. The start is
  // mixed, not stepped: SplitMix64 streams started a multiple of its step
  // apart are the same stream shifted (fork(1000) would replay fork(0)
  // from its 1000th draw).
  ServeRng fork(uint64_t index) const;

 private:
  uint64_t state_;
};

// One length around `mean` (fixed or lognormal), in [1, max].
int64_t drawLength(ServeRng& rng, int64_t mean, bool lognormal, int64_t max);

// `count` token ids drawn from `vocabulary` (the ids a prompt may use).
std::vector<int32_t> drawTokens(ServeRng& rng, std::span<const int32_t> vocabulary, int64_t count);

// `count` arrival times in seconds from 0 for Poisson arrivals at `rate`
// requests/s (exponential gaps; the first request arrives after one gap).
std::vector<double> poissonArrivals(ServeRng& rng, int64_t count, double rate);

// Linear-interpolated percentile p in [0, 100] of `values` (as numpy's
// default); 0 for none.
double percentile(std::vector<double> values, double p);

}  // namespace kiln
