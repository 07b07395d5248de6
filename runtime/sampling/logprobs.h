// Log probabilities of a generated token and its most likely alternatives:
// log-softmax of the model's raw logits row for that position, before
// penalties, temperature, top-k/p and min-p change it (vLLM's default,
// "raw" logprobs). Computed on the host from the row the sampler reads.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace kiln::sampling {

struct TokenLogprobs {
  int32_t token = -1;
  float logprob = 0;  // of `token`; -inf when its logit is -inf or NaN
  // The `top_n` most likely tokens, most likely first (ties: lower id first).
  std::vector<std::pair<int32_t, float>> top;
};

// logits: [vocab] f32, the raw row. NaN logits count as -inf. Sums in
// double: log p = x - (max + log sum exp(x - max)).
TokenLogprobs tokenLogprobs(std::span<const float> logits, int32_t token, int top_n);

}  // namespace kiln::sampling
