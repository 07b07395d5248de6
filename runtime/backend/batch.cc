#include "runtime/backend/batch.h"

namespace kiln {

Status checkBatchInputs(const BatchInputs& in, const BatchLimits& limits, size_t logits_out_floats) {
  const int64_t max_tokens = limits.max_tokens, vocab = limits.vocab;
  const int64_t n = int64_t(in.tokens.size());
  const int64_t b = int64_t(in.kv_lens.size());
  if (n <= 0 || n > max_tokens)
    return makeError("forward: {} tokens; expected 1 to the token budget {}", n, max_tokens);
  if (int64_t(in.positions.size()) != n || int64_t(in.slot_mapping.size()) != n)
    return makeError("forward: positions has {} and slot_mapping {} entries; expected one per "
                     "token ({})",
                     in.positions.size(), in.slot_mapping.size(), n);
  if (b <= 0 || b > n)
    return makeError("forward: {} sequences for {} tokens; expected 1 to {}", b, n, n);
  if (int64_t(in.query_start.size()) != b + 1)
    return makeError("forward: query_start has {} entries; expected {} (sequences + 1)",
                     in.query_start.size(), b + 1);
  if (in.max_blocks <= 0 || int64_t(in.block_tables.size()) != b * in.max_blocks)
    return makeError("forward: block_tables has {} entries; expected {} sequences x max_blocks "
                     "{}",
                     in.block_tables.size(), b, in.max_blocks);
  const int64_t out_rows = limits.logits_per_sequence ? b : n;
  if (int64_t(logits_out_floats) < out_rows * vocab)
    return makeError("forward: logits_out holds {} floats; expected {} rows x vocab {}",
                     logits_out_floats, out_rows, vocab);
  if (in.query_start[0] != 0 || in.query_start[size_t(b)] != n)
    return makeError("forward: query_start must run from 0 to the token count {}, got {} .. {}",
                     n, in.query_start[0], in.query_start[size_t(b)]);
  for (int64_t s = 0; s < b; ++s) {
    const int32_t q0 = in.query_start[size_t(s)], q1 = in.query_start[size_t(s + 1)];
    if (q1 <= q0)
      return makeError("forward: sequence {} has no tokens (query_start {} .. {})", s, q0, q1);
    const int32_t kv_len = in.kv_lens[size_t(s)];
    if (kv_len < q1 - q0 || int64_t(kv_len) > int64_t(in.max_blocks) * limits.page_size)
      return makeError("forward: sequence {} has kv_len {}; expected {} (its tokens) to {} "
                       "(max_blocks x page_size)",
                       s, kv_len, q1 - q0, int64_t(in.max_blocks) * limits.page_size);
    const int64_t used = (kv_len + limits.page_size - 1) / limits.page_size;
    for (int64_t j = 0; j < used; ++j) {
      const int32_t block = in.block_tables[size_t(s * in.max_blocks + j)];
      if (block < 0 || block >= limits.num_blocks)
        return makeError("forward: block_tables[{}][{}] = {} is outside the pool's {} blocks", s,
                         j, block, limits.num_blocks);
    }
  }
  for (int64_t t = 0; t < n; ++t) {
    if (in.tokens[size_t(t)] < 0 || in.tokens[size_t(t)] >= vocab)
      return makeError("forward: token {} at index {} is outside the vocabulary [0, {})",
                       in.tokens[size_t(t)], t, vocab);
    if (in.positions[size_t(t)] < 0)
      return makeError("forward: position {} at index {} is negative", in.positions[size_t(t)], t);
    if (in.slot_mapping[size_t(t)] < 0 || in.slot_mapping[size_t(t)] >= limits.num_blocks * limits.page_size)
      return makeError("forward: slot {} at index {} is outside the pool's {} slots",
                       in.slot_mapping[size_t(t)], t, limits.num_blocks * limits.page_size);
  }
  if (limits.state_slots > 0) {
    if (int64_t(in.state_slots.size()) != b)
      return makeError("forward: state_slots has {} entries; expected one per sequence ({})", in.state_slots.size(),
                       b);
    for (int64_t s = 0; s < b; ++s) {
      const int32_t slot = in.state_slots[size_t(s)];
      if (slot < 0 || slot >= limits.state_slots)
        return makeError("forward: state_slots[{}] = {} is outside the state pool's {} slots", s, slot,
                         limits.state_slots);
      for (int64_t o = 0; o < s; ++o)
        if (in.state_slots[size_t(o)] == slot)
          return makeError("forward: sequences {} and {} share state slot {}", o, s, slot);
    }
  }
  return {};
}

}  // namespace kiln
