// One sequence's state from submit to finish: its tokens, how many of them
// have keys and values in the pool, its block table, and what the engine
// needs to sample and stream it. The scheduler reads and moves the first
// group; the engine owns the rest.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/engine/engine.h"
#include "runtime/engine/spec_state.h"
#include "runtime/kv/block_pool.h"
#include "runtime/kv/prefix_cache.h"
#include "runtime/sampling/sampler.h"
#include "runtime/sampling/stop_checker.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kiln {

using Clock = std::chrono::steady_clock;

struct Sequence {
  int64_t id = 0;
  int priority = 0;
  uint64_t arrival = 0;          // submit order; FIFO within a priority
  std::vector<int32_t> tokens;   // prompt, then generated tokens
  int64_t prompt_len = 0;
  int64_t computed = 0;          // tokens whose keys/values are in the pool
  BlockTable table;
  // The prefix cache's node of this sequence's last cached block, and how
  // many of its blocks are cached (insert continues from there).
  PrefixCache::Node* cache_tail = nullptr;
  int64_t cached_blocks = 0;
  bool cancelled = false;
  bool finished = false;         // stats.finish is set; retired at the next step
  // Completions 2..n of a parallel-sampling request: they fork this
  // sequence's table when its prompt is done, sampling from the same logits.
  std::vector<std::unique_ptr<Sequence>> forks;
  int completions = 1;           // n of the request whose first completion this is

  std::optional<sampling::Sampler> sampler;
  std::optional<StreamingDetokenizer> detokenizer;
  std::optional<sampling::StopChecker> stop;
  TokenCallback on_token;
  LogprobsCallback on_logprobs;  // requests with sampling.logprobs >= 0
  std::optional<SpecState> spec;  // speculative decoding, when the request asks for it
  RequestStats stats;
  Clock::time_point submitted, started, first_token;
  bool ever_started = false;

  explicit Sequence(int page_size) : table(page_size) {}
  int64_t generated() const { return int64_t(tokens.size()) - prompt_len; }
  // Tokens still to be run through the model before the next sample: the
  // rest of the prompt (or of a recomputation), or the last sampled token.
  int64_t pending() const { return int64_t(tokens.size()) - computed; }
  bool decoding() const { return pending() == 1 && computed > 0; }
};

}  // namespace kiln
