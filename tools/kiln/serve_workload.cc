#include "tools/kiln/serve_workload.h"

#include <algorithm>
#include <cmath>

namespace kiln {

uint64_t ServeRng::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

ServeRng ServeRng::fork(uint64_t index) const {
  ServeRng mixer(state_ ^ ServeRng(index).next());
  return ServeRng(mixer.next());
}

double ServeRng::uniform() {
  // 53 random bits, shifted off 0 so log() stays finite.
  return (double(next() >> 11) + 0.5) * 0x1.0p-53;
}

double ServeRng::normal() {
  constexpr double kTwoPi = 6.283185307179586;
  return std::sqrt(-2.0 * std::log(uniform())) * std::cos(kTwoPi * uniform());
}

int64_t drawLength(ServeRng& rng, int64_t mean, bool lognormal, int64_t max) {
  double length = double(mean);
  if (lognormal) {
    const double mu = std::log(double(mean)) - kLognormalSigma * kLognormalSigma / 2;
    length = std::exp(mu + kLognormalSigma * rng.normal());
  }
  return std::clamp<int64_t>(std::llround(length), 1, std::max<int64_t>(1, max));
}

std::vector<int32_t> drawTokens(ServeRng& rng, std::span<const int32_t> vocabulary, int64_t count) {
  std::vector<int32_t> ids(size_t(std::max<int64_t>(0, count)));
  for (int32_t& id : ids) id = vocabulary[size_t(rng.next() % vocabulary.size())];
  return ids;
}

std::vector<double> poissonArrivals(ServeRng& rng, int64_t count, double rate) {
  std::vector<double> times;
  double t = 0;
  for (int64_t i = 0; i < count; ++i) {
    t += -std::log(rng.uniform()) / rate;
    times.push_back(t);
  }
  return times;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * double(values.size() - 1);
  const size_t below = size_t(std::floor(rank));
  const size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (values[above] - values[below]) * (rank - double(below));
}

}  // namespace kiln
