#include "runtime/sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::sampling {

TokenLogprobs tokenLogprobs(std::span<const float> logits, int32_t token, int top_n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  auto at = [&](size_t i) { return std::isnan(logits[i]) ? kNegInf : logits[i]; };
  float max = kNegInf;
  for (size_t i = 0; i < logits.size(); ++i) max = std::max(max, at(i));
  double sum = 0;
  if (max > kNegInf)
    for (size_t i = 0; i < logits.size(); ++i) sum += std::exp(double(at(i)) - double(max));
  const double log_z = max > kNegInf ? double(max) + std::log(sum) : 0.0;
  auto logprob = [&](size_t i) { return at(i) == kNegInf ? kNegInf : float(double(at(i)) - log_z); };

  TokenLogprobs out;
  out.token = token;
  out.logprob = token >= 0 && size_t(token) < logits.size() ? logprob(size_t(token)) : kNegInf;
  const size_t n = std::min(size_t(std::max(top_n, 0)), logits.size());
  if (n == 0) return out;
  // The n best so far, best first: one pass, a few insertions (n <= 20).
  auto more_likely = [&](int32_t a, int32_t b) {
    return at(size_t(a)) > at(size_t(b)) || (at(size_t(a)) == at(size_t(b)) && a < b);
  };
  std::vector<int32_t> best;
  best.reserve(n + 1);
  for (size_t i = 0; i < logits.size(); ++i) {
    if (best.size() == n && !more_likely(int32_t(i), best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), int32_t(i), more_likely), int32_t(i));
    if (best.size() > n) best.pop_back();
  }
  out.top.reserve(n);
  for (int32_t id : best) out.top.emplace_back(id, logprob(size_t(id)));
  return out;
}

}  // namespace kiln::sampling
