// Per-request sampling settings, as an OpenAI-style request carries them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/support/error.h"

namespace kiln::sampling {

// The most completions one request may ask for (n).
inline constexpr int kMaxCompletions = 128;
// The most alternatives a generated token's log probabilities may list
// (OpenAI's top_logprobs limit).
inline constexpr int kMaxLogprobs = 20;

struct SamplingParams {
  float temperature = 0.0f;         // 0 => greedy (argmax); otherwise logits / temperature
  int top_k = 0;                    // keep the k most likely tokens; 0 = off
  float top_p = 1.0f;               // keep the smallest set with mass >= top_p; 1 = off
  float min_p = 0.0f;               // drop tokens with p < min_p * p_max; 0 = off
  float repetition_penalty = 1.0f;  // HF: seen tokens' logits / rp if > 0, * rp if < 0
  float frequency_penalty = 0.0f;   // OpenAI: logit -= fp * count(token)
  float presence_penalty = 0.0f;    // OpenAI: logit -= pp if the token was seen
  uint64_t seed = 0;                // per-request RNG seed
  int max_tokens = 256;             // generated tokens before the request ends
  // Completions sampled for one prompt (parallel sampling): the prompt's KV
  // blocks are shared, copied on write where they diverge; completion i
  // samples with seed + i.
  int n = 1;
  std::vector<std::string> stop_strings;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;          // keep generating past the model's EOS tokens
  // Per generated token, its log probability and the `logprobs` most likely
  // tokens' (0 to kMaxLogprobs): log-softmax of the model's raw logits for
  // that position, before penalties, temperature, top-k/p and min-p (what
  // vLLM returns by default). -1: none.
  int logprobs = -1;

  // The first invalid field, e.g. "temperature -0.5 is invalid: expected >= 0".
  Status validate() const;

  // Whether the token is the argmax of the raw logits (greedyToken):
  // temperature 0 and no penalty that changes logits first.
  bool isPlainGreedy() const {
    return temperature == 0.0f && repetition_penalty == 1.0f && frequency_penalty == 0.0f &&
           presence_penalty == 0.0f;
  }

  // Whether `token` ends the request: a stop_token_id, or one of the model's
  // eos_token_ids unless ignore_eos.
  bool isStopToken(int32_t token, std::span<const int32_t> eos_token_ids) const;
};

}  // namespace kiln::sampling
