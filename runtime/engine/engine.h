// The engine: loads an artifact (manifest + weights), owns the backend and
// the KV block pool, and serves many requests at once with continuous
// batching: every step() forms one ragged batch of decode tokens and prefill
// chunks under a token budget, runs `forward`, samples, and streams text.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/chat/chat_template.h"
#include "runtime/cuda/cuda_tuning.h"
#include "runtime/sampling/logprobs.h"
#include "runtime/sampling/sampling_params.h"
#include "runtime/spec/drafter.h"
#include "runtime/support/error.h"

namespace kiln {

class Backend;
class Tokenizer;
struct Manifest;

struct EngineOptions {
  int threads = 0;                // CPU kernel threads; 0 = all cores
  int64_t max_batch_tokens = 512;  // token budget of one forward call (T_max)
  int max_sequences = 16;         // sequences decoding at once
  int64_t kv_cache_tokens = 0;    // KV pool capacity in tokens; 0 = 8192
  bool progress = true;           // progress bar on stderr while loading
  // "cpu", "cuda" or "auto": auto tries the CUDA backend and falls back to
  // the CPU with a one-line notice on stderr (unless !progress).
  std::string device = "auto";
  // Weights (and tokenizer) from another copy of the same checkpoint than
  // the one the artifact names, e.g. one written on another machine; the
  // size/mtime stamp check is off, tensor names, types and shapes are still
  // checked. Empty: the manifest's model.source.
  std::string model_source;
  // Serve at most this many tokens of context per sequence (prompt and
  // generated), below the model's own limit; 0 = the model's limit.
  int64_t max_context = 0;
  // CUDA only: size the KV pool from the GPU's memory, this fraction of it
  // in all (weights, activations and pool, as vLLM's gpu_memory_utilization),
  // instead of kv_cache_tokens; 0 = kv_cache_tokens.
  double gpu_memory_fraction = 0;
  // CUDA only: the optimizations an A/B measurement may switch off.
  cuda::CudaTuning cuda;
  // CUDA only: the activation type a model (not an artifact) is compiled
  // with for the GPU: bf16 (fast), or f32 (vLLM's --dtype float32: the
  // numerics of transformers in fp32, at a fraction of the speed).
  std::string cuda_dtype = "bf16";
  // Reuse the KV of cached block-aligned prompt prefixes (a radix tree over
  // token runs, LRU-evicted when the pool needs the blocks).
  bool prefix_cache = true;
  // Jinja source rendering chat requests instead of the model's own
  // template (vLLM's --chat-template); empty: the model's.
  std::string chat_template;
  // A draft model's artifact for speculative decoding (SpecMethod::
  // kDraftModel): it must have the target's vocabulary; it runs on the
  // target's backend with its own KV pool of kv_cache_tokens (a tree needs
  // it compiled with a verify entry that holds the tree). Empty: none.
  std::string draft_model;
  // The draft's weights and tokenizer from another copy, as model_source.
  std::string draft_model_source;
  // A Medusa draft head checkpoint (SpecMethod::kDraftHead,
  // runtime/spec/draft_head.h): its hidden size must be the target's; the
  // backend must show its hidden states (CPU). Empty: none.
  std::string draft_head;
};

// Whether this process can run the CUDA backend (driver loads, a GPU is
// visible, one kiln has kernels for); on false, `why` says what is missing.
// `target` gets the kiln-compile --target for the first GPU.
bool cudaAvailable(std::string* why = nullptr, std::string* target = nullptr);

enum class FinishReason { kRunning, kLength, kStop, kEos, kCancelled, kError };
std::string_view finishReasonName(FinishReason reason);

// Speculative decoding for one request (docs/design/speculative.md): each
// decode step the drafter proposes tokens in the shape `tree` and one verify
// forward keeps the longest path the model agrees with: greedily (the
// output is plain greedy decoding's), or for sampled requests by
// speculative sampling (the output has the sampler's distribution). The
// artifact needs a verify entry at least as large (kiln-compile --spec-tree).
// kNgram: prompt lookup; kDraftModel: the engine's draft model
// (EngineOptions::draft_model), greedy drafts of the top widths[d] tokens;
// kLayerSkip: the target's first `layerskip` layers (the artifact's draft
// entry, kiln-compile --spec-layerskip K), the top widths[d] tokens;
// kDraftHead: the engine's draft head (EngineOptions::draft_head) over the
// target's hidden state, head d's top widths[d] tokens at depth d + 1.
enum class SpecMethod { kNone, kNgram, kDraftModel, kLayerSkip, kDraftHead };

struct SpeculationParams {
  SpecMethod method = SpecMethod::kNone;
  spec::TreeShape tree;  // a chain of k is k widths of 1
  int64_t layerskip = 0;  // kLayerSkip: the draft's layers K
  bool enabled() const { return method != SpecMethod::kNone; }
};

struct GenerationRequest {
  std::string prompt;                 // used as is unless `chat`
  std::vector<int32_t> prompt_tokens; // if set: the prompt as token ids (no template)
  bool chat = false;                  // wrap `messages` (or prompt) in the chat template
  std::vector<ChatMessage> messages;  // chat only; empty: one user message = prompt
  // Chat only: the tools the template offers (JSON function schemas) and
  // more template variables (a JSON object, e.g. {"enable_thinking": false}).
  std::vector<std::string> tools;
  std::string chat_template_kwargs;
  sampling::SamplingParams sampling;
  // A prompt longer than the context is an error unless this asks to keep
  // only its last tokens.
  bool truncate_prompt = false;
  // Higher runs first: admitted before, and preempted after, every request
  // of a lower priority; first come, first served within one priority.
  int priority = 0;
  SpeculationParams speculation;
};

struct RequestStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens whose KV came from the prefix cache
  int64_t preemptions = 0;           // times its KV was dropped and recomputed
  // Speculative decoding: verify rows that carried drafts, the draft tokens
  // they carried, and how many of those were accepted.
  int64_t spec_rows = 0;
  int64_t spec_drafted_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  double queue_seconds = 0;    // submit -> first forward call
  double prefill_seconds = 0;  // first forward call -> first token
  double decode_seconds = 0;   // first token -> finish
  FinishReason finish = FinishReason::kRunning;
  std::string error;           // for kError
};

// Called on the engine's thread for each generated token with the text it
// releases (possibly empty: held-back partial UTF-8 or stop-string prefix),
// and at a normal end once more with token -1 if held-back text remains.
using TokenCallback =
    std::function<void(int64_t request_id, int32_t token, std::string_view text)>;
// For a request with SamplingParams::logprobs >= 0: called on the engine's
// thread for each generated token, just before its TokenCallback, with the
// token's log probability and the top alternatives (sampling/logprobs.h:
// the raw distribution, before penalties and temperature).
using LogprobsCallback = std::function<void(int64_t request_id, const sampling::TokenLogprobs& logprobs)>;

// The engine's state between steps, for schedulers above it, benchmarks and
// a server's metrics.
struct EngineMetrics {
  int64_t waiting = 0;          // requests queued (including preempted ones)
  int64_t running = 0;          // sequences holding KV
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_free = 0;   // on the free list
  int64_t kv_blocks_cached = 0; // held only by the prefix cache (evictable)
  // Held by the queued and running sequences, counted from their block
  // tables (held_blocks.h): free + cached + used == total when the pool's
  // bookkeeping is exact.
  int64_t kv_blocks_used = 0;
  int64_t prefix_cache_blocks = 0;  // the prefix cache's tree (cached-only or also in use)
  int64_t prefix_queried_tokens = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_hit_tokens = 0;      // of those, found (their prefill skipped)
  int64_t preemptions = 0;      // sequences preempted so far
  int64_t steps = 0;            // forward calls so far
  int64_t spec_rows = 0;        // speculative decoding, as RequestStats, over all requests
  int64_t spec_drafted_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  // The draft model's own KV pool (0 without one) and the sequences with
  // draft KV in it.
  int64_t draft_kv_blocks_total = 0;
  int64_t draft_kv_blocks_free = 0;
  int64_t draft_sequences = 0;
  // State-space models' state slots (0 without state-space layers), and the
  // bytes all slots take (every layer's conv inputs and SSM state).
  int64_t state_slots_total = 0;
  int64_t state_slots_free = 0;
  int64_t state_bytes = 0;
  double prefixHitRate() const {
    return prefix_queried_tokens > 0 ? double(prefix_hit_tokens) / double(prefix_queried_tokens) : 0.0;
  }
};

class Engine {
 public:
  // `artifact_dir` holds manifest.json; the weights are mapped from the model
  // the manifest names.
  static Result<std::unique_ptr<Engine>> open(const std::string& artifact_dir,
                                              const EngineOptions& options);
  // Serves on a backend the caller built (an executor of its own, or a
  // test's), with its tokenizer and context length; there is no manifest
  // (manifest() is empty) and no chat template. `sliding_window`: the
  // model's attention window when every layer slides, else 0.
  static Result<std::unique_ptr<Engine>> fromBackend(std::unique_ptr<Backend> backend, Tokenizer tokenizer,
                                                     int64_t context_length, const EngineOptions& options,
                                                     int64_t sliding_window = 0);
  ~Engine();

  // Tokenizes and queues a request; bad sampling values, an over-long
  // prompt or one larger than the whole KV pool fail here, and nothing else
  // is disturbed. Returns the id of its first completion; with sampling.n > 1
  // the completions have the ids first, first + 1, ..., first + n - 1, each
  // with its own stats and callback calls.
  // Log probabilities are computed on the host from the row the sampler
  // reads (a batch with such a row takes its logits back rather than the
  // CUDA executor's on-device argmax); with speculation they are refused.
  Result<int64_t> submit(GenerationRequest request, TokenCallback on_token, LogprobsCallback on_logprobs = {});
  // The prompt `request` runs as token ids: its chat template rendered (with
  // the generation prompt) and tokenized, or its ids; before truncation.
  // Thread-safe (the tokenizer and the template are immutable): a server
  // answers /tokenize with it from its own threads.
  Result<std::vector<int32_t>> promptTokens(const GenerationRequest& request) const;
  // Ends a request: its KV blocks return to the pool at once (at the next
  // step when called from a token callback). The id of a request's first
  // completion cancels all its completions; another id only that one.
  // Cancelling a request that has ended does nothing.
  void cancel(int64_t request_id);
  // Runs one scheduler iteration (one forward call) if there is work.
  Status step();
  // True when no request is waiting or running.
  bool idle() const;
  // Steps until idle or until `should_stop` returns true (e.g. Ctrl-C).
  Status runUntilIdle(const std::function<bool()>& should_stop = {});

  const RequestStats* stats(int64_t request_id) const;
  // Drops an ended completion's stats, which the engine otherwise keeps for
  // stats() as long as it lives (a server forgets them once read, so its
  // memory stays flat). Ids of requests not yet retired are ignored.
  void forgetStats(int64_t request_id);
  EngineMetrics metrics() const;

  // The natural log of the probability of each of tokens[1..] given the
  // tokens before it (tokens.size() - 1 values), from one causal pass: each
  // position is a sequence of its own over shared KV blocks, so a forward
  // yields every position's logits (perplexity; kiln bench ppl). Needs an
  // idle engine and tokens.size() <= contextLength().
  Result<std::vector<double>> scoreTokens(std::span<const int32_t> tokens);
  // Whether requests may ask for `speculation`: the artifact's verify entry
  // holds the tree (its nodes and depth); the error says what to compile.
  Status checkSpeculation(const SpeculationParams& speculation) const;
  const Tokenizer& tokenizer() const;
  // The chat template chat requests are rendered with; null without one.
  const ChatTemplate* chatTemplate() const;
  const Manifest& manifest() const;
  int64_t contextLength() const;
  std::string backendName() const;
  // The backend it drives, for measurements that bypass the scheduler
  // (kiln bench decode --verify); needs an idle engine.
  Backend& backend();

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln
