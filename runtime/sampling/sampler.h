// Per-request token sampler: penalties, temperature, top-k, top-p, min-p, then
// a draw from the request's own RNG. Same seed + same logits => same tokens,
// on any machine and regardless of what else is in the batch.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "runtime/sampling/sampling_params.h"
#include "runtime/support/error.h"

namespace kiln::sampling {

// The greedy token: the largest logit, NaN ignored, lowest id on ties; 0
// when no logit is a number. The CUDA executor's on-device argmax
// (forwardGreedy) follows the same rule.
int32_t greedyToken(std::span<const float> logits);

class Sampler {
 public:
  // Validates params; the error names the first bad field.
  static Result<Sampler> create(const SamplingParams& params);

  // logits:          [vocab] f32 for the next position; modified in place
  //                  (penalties, temperature), so pass a copy if you need it.
  // previous_tokens: ids the penalties look at (HF applies the repetition
  //                  penalty over prompt + generated tokens); ids outside
  //                  [0, vocab) are ignored.
  // Returns the chosen id, or -1 if logits is empty. Steps, in order:
  //  1. repetition penalty (HF), then frequency/presence penalties (OpenAI)
  //  2. temperature == 0: argmax (lowest id on ties), done
  //  3. logits / temperature; top-k; top-p (smallest most-likely prefix whose
  //     mass reaches top_p); min-p (drop p < min_p * p_max); draw.
  int32_t sample(std::span<float> logits, std::span<const int32_t> previous_tokens);

  // Speculative sampling over deterministic drafts (an n-gram drafter's
  // children of one tree node, distinct tokens): with p the distribution
  // sample() would draw from at `logits` (same steps, same RNG), the drafts
  // are tried in order, each accepted with probability r(x), r the residual
  // (p less the drafts rejected before it, renormalized). Returns the
  // accepted draft's index, or -1 with `token` drawn from the last residual;
  // the emitted token is then distributed as p. At temperature 0 the draft
  // that is the greedy token is accepted, else `token` is it.
  int speculate(std::span<float> logits, std::span<const int32_t> previous_tokens,
                std::span<const int32_t> drafts, int32_t& token);

  const SamplingParams& params() const { return params_; }

 private:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}
  void applyPenalties(std::span<float> logits, std::span<const int32_t> previous_tokens);
  // Steps 1-3 up to the draw: the kept tokens with their unnormalized
  // weights in candidates_[0, kept); or `direct` (>= 0) when one token is
  // the answer (temperature 0, nothing finite), then 0.
  size_t candidatesFor(std::span<float> logits, std::span<const int32_t> previous_tokens, int32_t& direct);
  // One draw over candidates_[0, kept).
  int32_t draw(size_t kept);
  // Uniform in [0, 1) from 53 random bits: the same stream on every platform
  // (std::uniform_real_distribution is implementation-defined).
  double uniform();

  SamplingParams params_;
  std::mt19937_64 rng_;
  // Scratch reused across calls so steady-state sampling does not allocate.
  std::vector<int32_t> counts_;
  std::vector<int32_t> seen_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

}  // namespace kiln::sampling
