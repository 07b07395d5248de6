#include "runtime/sampling/sampler.h"

#include <algorithm>
#include <cmath>

namespace kiln::sampling {
namespace {

// Descending logit, ascending id on ties: a total order, so results do not
// depend on the sort implementation.
bool moreLikely(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

Result<Sampler> Sampler::create(const SamplingParams& params) {
  if (Status s = params.validate(); !s.ok()) return s.error();
  return Sampler(params);
}

double Sampler::uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

void Sampler::applyPenalties(std::span<float> logits, std::span<const int32_t> previous_tokens) {
  const SamplingParams& p = params_;
  if (previous_tokens.empty() ||
      (p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f))
    return;
  const int64_t vocab = int64_t(logits.size());
  if (int64_t(counts_.size()) < vocab) counts_.resize(size_t(vocab), 0);
  seen_.clear();
  for (int32_t id : previous_tokens) {
    if (id < 0 || id >= vocab) continue;
    if (counts_[size_t(id)]++ == 0) seen_.push_back(id);
  }
  for (int32_t id : seen_) {
    float& logit = logits[size_t(id)];
    if (p.repetition_penalty != 1.0f)
      logit = logit > 0.0f ? logit / p.repetition_penalty : logit * p.repetition_penalty;
    logit -= p.frequency_penalty * float(counts_[size_t(id)]) + p.presence_penalty;
    counts_[size_t(id)] = 0;  // leave the scratch zeroed for the next call
  }
}

int32_t greedyToken(std::span<const float> logits) {
  int64_t best = -1;
  for (int64_t i = 0; i < int64_t(logits.size()); ++i)
    if (!std::isnan(logits[size_t(i)]) && (best < 0 || logits[size_t(i)] > logits[size_t(best)])) best = i;
  return int32_t(std::max<int64_t>(best, 0));
}

size_t Sampler::candidatesFor(std::span<float> logits, std::span<const int32_t> previous_tokens,
                              int32_t& direct) {
  direct = -1;
  if (logits.empty()) return 0;
  applyPenalties(logits, previous_tokens);
  const int64_t vocab = int64_t(logits.size());

  if (params_.temperature == 0.0f) {
    direct = greedyToken(logits);
    return 0;
  }

  const float inv_temperature = 1.0f / params_.temperature;
  candidates_.clear();
  for (int64_t i = 0; i < vocab; ++i)
    if (!std::isnan(logits[size_t(i)]))
      candidates_.emplace_back(logits[size_t(i)] * inv_temperature, int32_t(i));
  if (candidates_.empty()) {
    direct = 0;
    return 0;
  }

  // Sort only as much as the filters need: top-k needs the k best, top-p needs
  // them in order; plain temperature sampling needs no order at all.
  size_t kept = candidates_.size();
  if (params_.top_k > 0 && size_t(params_.top_k) < kept) {
    std::nth_element(candidates_.begin(), candidates_.begin() + params_.top_k - 1,
                     candidates_.end(), moreLikely);
    kept = size_t(params_.top_k);
  }
  if (params_.top_p < 1.0f || params_.top_k > 0)
    std::sort(candidates_.begin(), candidates_.begin() + ptrdiff_t(kept), moreLikely);

  float max_logit = -INFINITY;
  for (size_t i = 0; i < kept; ++i) max_logit = std::max(max_logit, candidates_[i].first);
  if (std::isinf(max_logit) && max_logit < 0) {  // all -inf
    direct = candidates_[0].second;
    return 0;
  }

  // Unnormalized probabilities relative to the best token (which gets 1).
  std::vector<std::pair<float, int32_t>>& c = candidates_;
  double total = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    c[i].first = std::exp(c[i].first - max_logit);
    total += c[i].first;
  }

  if (params_.top_p < 1.0f) {
    const double target = double(params_.top_p) * total;
    double cumulative = 0.0;
    size_t prefix = 0;
    while (prefix < kept) {
      cumulative += c[prefix++].first;
      if (cumulative >= target) break;
    }
    kept = std::max<size_t>(prefix, 1);
  }

  if (params_.min_p > 0.0f) {
    // p / p_max < min_p, and p_max is 1 here; order is not needed.
    size_t write = 0;
    for (size_t i = 0; i < kept; ++i)
      if (c[i].first >= params_.min_p) c[write++] = c[i];
    kept = write;  // the best token always survives (1 >= min_p)
  }
  return kept;
}

int32_t Sampler::draw(size_t kept) {
  const std::vector<std::pair<float, int32_t>>& c = candidates_;
  double total = 0.0;
  for (size_t i = 0; i < kept; ++i) total += c[i].first;
  const double u = uniform() * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    cumulative += c[i].first;
    if (u < cumulative) return c[i].second;
  }
  return c[kept - 1].second;  // u landed on the rounding slack at the top
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> previous_tokens) {
  if (logits.empty()) return -1;
  int32_t direct = -1;
  const size_t kept = candidatesFor(logits, previous_tokens, direct);
  return direct >= 0 ? direct : draw(kept);
}

int Sampler::speculate(std::span<float> logits, std::span<const int32_t> previous_tokens,
                       std::span<const int32_t> drafts, int32_t& token) {
  token = -1;
  if (logits.empty()) return -1;
  int32_t direct = -1;
  size_t kept = candidatesFor(logits, previous_tokens, direct);
  if (direct >= 0) {  // a one-token distribution: its token is accepted, or it is the answer
    for (size_t i = 0; i < drafts.size(); ++i)
      if (drafts[i] == direct) return int(i);
    token = direct;
    return -1;
  }
  // Draft x is a one-hot q: accepted with probability min(1, r(x) / q(x)) =
  // r(x), r the residual normalized; a rejected x leaves max(0, r - q), r
  // without x, renormalized.
  std::vector<std::pair<float, int32_t>>& c = candidates_;
  for (size_t i = 0; i < drafts.size(); ++i) {
    double total = 0.0, weight = 0.0;
    size_t at = kept;
    for (size_t j = 0; j < kept; ++j) {
      total += c[j].first;
      if (c[j].second == drafts[i]) weight = c[j].first, at = j;
    }
    if (uniform() * total < weight) return int(i);
    if (at < kept) c[at] = c[--kept];  // rejected: out of the residual
  }
  token = draw(kept);
  return -1;
}

}  // namespace kiln::sampling
