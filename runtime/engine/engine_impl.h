// Engine's private state and step machinery, shared by engine.cc (requests,
// forward steps) and speculative_step.cc (drafting and verification).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/artifact/manifest.h"
#include "runtime/backend/backend.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/held_blocks.h"
#include "runtime/engine/scheduler.h"
#include "runtime/engine/sequence.h"
#include "runtime/kv/block_pool.h"
#include "runtime/spec/draft_model.h"
#include "runtime/spec/draft_head.h"
#include "runtime/spec/layer_skip.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/weights/weight_store.h"

namespace kiln {

struct Engine::Impl {
  EngineOptions options;
  Manifest manifest;
  std::optional<WeightStore> weights;
  std::unique_ptr<Backend> executor;
  std::optional<Scheduler> scheduler;
  std::optional<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  std::string chat_template_error;
  std::vector<int32_t> eos_ids;
  int64_t context_length = 0;
  int64_t vocab = 0;
  int page_size = 16;

  int64_t next_id = 1;
  uint64_t next_arrival = 0;
  bool in_step = false;
  int64_t steps = 0;
  HeldBlockCounter held_blocks;  // metrics()'s used-block count
  std::map<int64_t, RequestStats> finished;

  // Reused per step so the hot path does not allocate once warm.
  std::vector<int32_t> batch_tokens, batch_positions, batch_slots, batch_tables,
      batch_query_start, batch_kv_lens, batch_state_slots;
  std::vector<float> logits;
  std::vector<int32_t> sampled;  // per batch row, -1 when the row samples nothing
  std::vector<int32_t> greedy_tokens;  // forwardGreedy's, per batch row
  std::vector<sampling::TokenLogprobs> row_logprobs;  // per batch row that reports logprobs
  std::vector<float> fork_row;
  // Speculative decoding's per-step state: each slice's draft tree (the
  // root alone when it drafts nothing), the verify call's inputs and
  // outputs, and the slot moves of accepted tree nodes.
  std::vector<spec::DraftTree> drafts;
  std::vector<int32_t> verify_parents, verify_base, verify_accepted, verify_counts;
  std::vector<SlotCopy> slot_moves;
  std::vector<int32_t> verify_next;  // a sampled row's next token (-1: greedy rows sample it after)
  std::vector<int32_t> spec_history, spec_children, spec_child_tokens;
  int64_t spec_rows = 0, spec_drafted = 0, spec_accepted = 0;
  // The drafters requests share, and a step's rows for each. The draft
  // model's weights outlive its executor (declared before it).
  spec::NgramDrafter ngram;
  Manifest draft_manifest;
  std::optional<WeightStore> draft_weights;
  std::unique_ptr<spec::DraftModelDrafter> draft_model;
  std::unique_ptr<spec::LayerSkipDrafter> layer_skip;  // when the artifact has a draft entry
  std::unique_ptr<spec::DraftHeadDrafter> draft_head;  // EngineOptions::draft_head
  std::vector<spec::DraftRequest> ngram_rows, draft_rows, skip_rows;
  std::vector<size_t> skip_slices;  // the plan's slice of each of skip_rows
  std::vector<spec::DraftRequest> head_rows;
  std::vector<size_t> head_slices;  // the plan's slice of each of head_rows
  std::vector<int32_t> verify_last;  // each verify row's last accepted node
  std::vector<size_t> model_slices;  // the plan's slice of each of draft_rows
  std::vector<int64_t> draft_live;

  // `sliding_window`: every layer's (the smallest), 0 if one attends to all.
  void startScheduler(int64_t sliding_window) {
    SchedulerOptions scheduling;
    scheduling.max_sequences = options.max_sequences;
    scheduling.max_batch_tokens = executor->maxTokens();
    scheduling.prefix_cache = options.prefix_cache;
    scheduling.state_pool = executor->statePool();
    if (scheduling.state_pool && options.prefix_cache && options.progress)
      fmt::print(stderr, "kiln: prefix caching is off for this model: its state-space layers carry a recurrent "
                         "state that cached KV blocks do not hold\n");
    if (executor->honorsSlidingWindows()) scheduling.sliding_window = sliding_window;
    scheduler.emplace(executor->blockPool(), scheduling);
  }
  void finish(Sequence& seq, FinishReason reason, std::string error = {});
  void emitToken(Sequence& seq, int32_t token);
  // Starts a parallel-sampling request's other completions from `parent`,
  // whose prompt is computed: each forks its table and samples its first
  // token from the same logits row (null: the greedy token `greedy`).
  void startForks(Sequence& parent, std::span<float> row, int32_t greedy);
  // Records the ends of retired sequences (and of forks that never started).
  void retire();
  Status step();
  // Flattens `slices` into the batch_* inputs (a verify batch when `trees`:
  // each slice's tokens are then its draft tree's nodes).
  Status flatten(const std::vector<ScheduledSlice>& slices, const std::vector<const spec::DraftTree*>* trees,
                 BatchInputs& in);
  // Forward over part of a step, commit, sample.
  Status runForward(const ScheduledStep& part);
  // Proposes drafts for the step's decode rows that speculate, growing their
  // tables for the draft nodes; false if none drafted.
  bool proposeDrafts(ScheduledStep& plan);
  // The decode rows as verify rows (with their drafts), then acceptance:
  // accepted nodes' KV moved into place, tokens emitted, the rest rolled back.
  Status runVerify(ScheduledStep& part, const std::vector<const spec::DraftTree*>& trees);
  // A sampled request's row b: speculative sampling down its tree
  // (Sampler::speculate at each node, the target's logits there), the
  // accepted path into verify_accepted / verify_counts, the token drawn
  // where it stopped into verify_next.
  void sampleTreePath(Sequence& seq, const spec::DraftTree& tree, size_t b, int64_t width);
  // The draft model keeps KV for running sequences only: finished,
  // cancelled and preempted ones give theirs back (each step, and as
  // sequences retire).
  void retainDraftKv();
  // A draft-model request: the engine has one, and a tree fits the draft's
  // own verify entry (it drafts branches through it).
  Status checkDraftModel(const SpeculationParams& speculation);
  // A LayerSkip request: K within the model's layers and the artifact's
  // draft entry of K layers.
  Status checkLayerSkip(const SpeculationParams& speculation);
  // After a forward (trees null: row b's hidden row is b) or a verify (row
  // b's row is its last accepted node's, `last[b]`): the draft head's
  // sequences keep the target's hidden state that chose their last token.
  void keepHidden(const std::vector<ScheduledSlice>& rows, const std::vector<int32_t>* last);
  // Opens the draft model of options.draft_model on the target's backend
  // kind with a pool of `kv_tokens`; refuses one whose vocabulary differs.
  Status openDraftModel(const std::string& artifact_dir, int64_t kv_tokens);
  // The drafters that run on the target's own backend: LayerSkip when its
  // plan has a draft entry, and the draft head in `head_dir` (if any), which
  // needs the backend's hidden states.
  Status openSelfDrafters(const std::string& head_dir);
  // The draft model's backend (engine.cc: the target's kind, its options).
  Result<std::unique_ptr<Backend>> createDraftBackend(const Manifest& m, WeightStore& weights, int64_t blocks);
};

// The tokenizer of the model an artifact was compiled from (its GGUF or
// tokenizer.json at `source`).
Result<Tokenizer> loadTokenizer(const WeightStore& weights, const std::string& source);

}  // namespace kiln
