#include "runtime/sampling/sampling_params.h"

#include <algorithm>

namespace kiln::sampling {

Status SamplingParams::validate() const {
  // Comparisons are written so that NaN fails them.
  if (!(temperature >= 0.0f))
    return makeError("temperature {} is invalid: expected >= 0", temperature);
  if (top_k < 0) return makeError("top_k {} is invalid: expected >= 0 (0 disables it)", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return makeError("top_p {} is invalid: expected a value in (0, 1]", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    return makeError("min_p {} is invalid: expected a value in [0, 1]", min_p);
  if (!(repetition_penalty > 0.0f))
    return makeError("repetition_penalty {} is invalid: expected > 0", repetition_penalty);
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    return makeError("frequency_penalty {} is invalid: expected a value in [-2, 2]",
                     frequency_penalty);
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    return makeError("presence_penalty {} is invalid: expected a value in [-2, 2]",
                     presence_penalty);
  if (max_tokens <= 0) return makeError("max_tokens {} is invalid: expected > 0", max_tokens);
  if (n < 1 || n > kMaxCompletions)
    return makeError("n {} is invalid: expected 1 <= n <= {}", n, kMaxCompletions);
  if (logprobs < -1 || logprobs > kMaxLogprobs)
    return makeError("logprobs {} is invalid: expected -1 (none) or 0 to {} alternatives", logprobs, kMaxLogprobs);
  for (size_t i = 0; i < stop_strings.size(); ++i)
    if (stop_strings[i].empty()) return makeError("stop_strings[{}] is invalid: expected a non-empty string", i);
  for (size_t i = 0; i < stop_token_ids.size(); ++i)
    if (stop_token_ids[i] < 0)
      return makeError("stop_token_ids[{}] = {} is invalid: expected >= 0", i, stop_token_ids[i]);
  return Status::success();
}

bool SamplingParams::isStopToken(int32_t token, std::span<const int32_t> eos_token_ids) const {
  if (std::find(stop_token_ids.begin(), stop_token_ids.end(), token) != stop_token_ids.end())
    return true;
  return !ignore_eos &&
         std::find(eos_token_ids.begin(), eos_token_ids.end(), token) != eos_token_ids.end();
}

}  // namespace kiln::sampling
