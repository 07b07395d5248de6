// The CPU backend's executor: runs an artifact's `forward` entry step by step
// over a ragged batch, with activations in one arena and keys/values in a
// paged block pool. Everything a step needs (arena addresses, weights, pools,
// kernel parameters) is resolved and checked once, at creation; forward()
// only checks the batch, walks the steps and calls the CPU kernels, and
// allocates nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/artifact/manifest.h"
#include "runtime/backend/batch.h"
#include "runtime/cpu/kernels/paged_attention.h"
#include "runtime/cpu/kernels/rope.h"
#include "runtime/kv/block_pool.h"
#include "runtime/kv/state_pool.h"
#include "runtime/support/error.h"
#include "runtime/weights/weight_store.h"

namespace kiln::cpu {

// A rope_kv_append step's rope params (checked by parseStepParams) as the
// CPU kernels take them; also what the GPU checks compare with transformers.
RopeParams ropeParamsOf(const RopeKvAppendParams& params);

class CpuExecutor {
 public:
  // `weights` must outlive the executor. `kv` must match the manifest's
  // kv_cache (layers, page_size, kv_heads, head_dim); the executor owns the
  // pool it creates from it. `max_tokens` is the token budget T_max: the
  // most tokens one forward call may carry; the arena holds
  // (arena.bytes_per_token + scratch) * T_max bytes.
  // A plan with state-space layers (manifest.state_cache) needs
  // `state_slots` > 0: the executor owns a state pool of that many slots
  // (one per sequence it may run at once), which statePool() shows.
  static Result<std::unique_ptr<CpuExecutor>> create(const Manifest& manifest,
                                                     const WeightStore& weights,
                                                     const KvPoolConfig& kv, int64_t max_tokens,
                                                     int64_t state_slots = 0);
  ~CpuExecutor();
  CpuExecutor(const CpuExecutor&) = delete;
  CpuExecutor& operator=(const CpuExecutor&) = delete;

  // Runs `forward`. logits_out: [B, vocab] f32, the logits of each
  // sequence's last token (at least B * vocab floats). A bad batch (sizes,
  // ids, slots, block ids out of range) is an error before anything is
  // written, so the pool is never partly updated.
  Status forward(const BatchInputs& in, std::span<float> logits_out);

  // Runs `forward` as the megakernel's tasks (`plan`, the forward entry's
  // megakernel section), each on its tile with the same kernels, in an
  // order a seeded random scheduler picks among the tasks whose waits are
  // met, as SMs racing would; checks that every task reads only what
  // finished tasks wrote (task_interpreter.cc). Same inputs and outputs as
  // forward; the batch may hold at most plan.max_batch sequences. A check
  // of the plan, not a serving path: it allocates its shadow of the arena
  // on every call.
  Status forwardTasks(const BatchInputs& in, std::span<float> logits_out, const MegakernelPlan& plan,
                      uint64_t seed);

  // Runs `verify` (an artifact compiled with kiln-compile --spec-tree): row
  // b of the batch is sequence b's draft tree (BatchInputs::parents,
  // base_positions; runtime/backend/tree_verify.h), its nodes' keys and
  // values appended at their slots. logits_out: [N, vocab], every node's;
  // accepted_out: [B, treeDepth() + 1] the accepted path's local node
  // indices from the root, -1 padded; count_out: [B] accepted draft tokens.
  Status verify(const BatchInputs& in, std::span<float> logits_out, std::span<int32_t> accepted_out,
                std::span<int32_t> count_out);
  // Nodes of the verify entry's tree, root included (0: no verify entry),
  // and the accepted path's longest length in draft tokens.
  int64_t treeNodes() const { return tree_nodes_; }
  int64_t treeDepth() const { return verify_path_width_ - 1; }
  // Runs `draft` (kiln-compile --spec-layerskip K): the verify entry's
  // inputs through the first draftLayers() layers, then the final norm and
  // LM head; logits_out [N, vocab], every node's. Layers < K append their
  // keys and values at the nodes' slots, the deeper layers nothing.
  Status draft(const BatchInputs& in, std::span<float> logits_out);
  // The draft entry's layers (0: no draft entry).
  int64_t draftLayers() const { return draft_layers_; }

  // The target's last hidden state (the final norm's output, the LM head's
  // input) of the latest forward or verify call: [rows, hiddenSize()], a
  // row per logits row; valid until the next call. A view of the arena,
  // so the hot path does nothing more for it.
  std::span<const float> lastHidden() const { return last_hidden_; }
  int64_t hiddenSize() const { return hidden_size_; }
  // The LM head over `rows` hidden rows of the caller's ([rows,
  // hiddenSize()] -> logits [rows, vocab]): forward's logits step alone.
  Status lmHead(std::span<const float> hidden, int64_t rows, std::span<float> logits);

  // Called after every step, once per result, with the result's rows
  // ([rows, width] f32; rows are tokens, or sequences for per-sequence
  // values), before any later step runs. For comparing intermediate values
  // with another engine (test/e2e/dump_cpu_steps.cc) and for calibration,
  // which reads each linear's inputs (models/quantize). Not for serving: an
  // empty function turns it off.
  using StepObserver = std::function<void(size_t step, StepKind kind, size_t result,
                                          std::span<const float> rows, int64_t width)>;
  void setStepObserver(StepObserver observer) { observer_ = std::move(observer); }

  BlockPool& blockPool() { return *pool_; }
  // The state-space layers' slots (null for attention-only plans).
  StatePool* statePool() { return state_pool_.get(); }
  int64_t vocabSize() const { return vocab_; }
  int64_t maxTokens() const { return max_tokens_; }
  int64_t arenaBytes() const { return arena_bytes_; }

  struct BoundStep;  // a step with its arguments resolved (executor.cc)

 private:
  CpuExecutor() = default;
  Status checkBatch(const BatchInputs& in, std::span<float> logits_out) const;
  Status runStep(const BoundStep& step, const BatchInputs& in, int64_t n, int64_t b);
  // A paged_attention step's kernel arguments over the whole batch (every
  // sequence and head; its tree mask when it has one).
  PagedAttentionArgs pagedAttentionArgs(const BoundStep& s, const BatchInputs& in, int64_t n, int64_t b) const;
  Status bindVerify(const Manifest& manifest, const Entry& entry, const WeightStore& weights);
  Status bindDraft(const Manifest& manifest, const Entry& entry, const WeightStore& weights);
  Status checkTreeBatch(const BatchInputs& in, std::span<float> logits_out) const;

  // Zeroes the state slots of the batch's sequences that start at position 0.
  void resetFreshStates(const BatchInputs& in);

  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<StatePool> state_pool_;
  std::vector<float> ssd_scratch_;  // the chunked SSD scan's (ssdScratchFloats)
  std::vector<BoundStep> steps_;
  float* arena_ = nullptr;
  int64_t arena_bytes_ = 0;
  int64_t max_tokens_ = 0;
  int64_t vocab_ = 0;
  float* logits_ = nullptr;  // the output value in the arena
  bool logits_per_sequence_ = true;
  StepObserver observer_;
  // The verify entry's steps and outputs in the same arena (empty without one).
  std::vector<BoundStep> verify_steps_;
  float* verify_logits_ = nullptr;
  int32_t* verify_accepted_ = nullptr;
  int32_t* verify_count_ = nullptr;
  int64_t verify_path_width_ = 1;
  int64_t tree_nodes_ = 0;
  // The draft entry's (empty without one).
  std::vector<BoundStep> draft_steps_;
  float* draft_logits_ = nullptr;
  int64_t draft_layers_ = 0;
  // The LM head step of forward and of verify (their last gemm), whose
  // input is the hidden state lastHidden() shows.
  const BoundStep* head_step_ = nullptr;
  const BoundStep* verify_head_step_ = nullptr;
  std::span<const float> last_hidden_;
  int64_t hidden_size_ = 0;
  // Scratch after the planned arena: roped keys and values [T_max, Hkv, D]
  // each, a residual sum [T_max, hidden], slots widened to i64 [T_max].
  float* scratch_k_ = nullptr;
  float* scratch_v_ = nullptr;
  float* scratch_sum_ = nullptr;
  int64_t* scratch_slots_ = nullptr;
  // Mixture of experts: router logits, then the grouped experts' rows
  // (sized at create for the largest moe step and the token budget).
  std::vector<float> moe_scratch_;
};

}  // namespace kiln::cpu
