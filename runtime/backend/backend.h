// What the engine drives: one executor behind a small virtual interface, so
// the scheduler is written once for every backend. An executor plugs in
// through ExecutorBackend; which one runs is the engine's choice.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "runtime/backend/batch.h"
#include "runtime/kv/block_pool.h"
#include "runtime/kv/state_pool.h"
#include "runtime/support/error.h"

namespace kiln {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Status forward(const BatchInputs& in, std::span<float> logits) = 0;
  // Whether forwardGreedy runs: each logits row's greedy token computed
  // where the logits are, so only ids come back.
  virtual bool greedyOnDevice() const { return false; }
  virtual Status forwardGreedy(const BatchInputs&, std::span<int32_t>) {
    return makeError("this backend computes no greedy tokens itself");
  }
  virtual BlockPool& blockPool() = 0;
  // The state-space layers' slots (runtime/kv/state_pool.h), null for
  // attention-only models. The engine's scheduler hands them out; a batch
  // names each sequence's in BatchInputs::state_slots.
  virtual StatePool* statePool() { return nullptr; }
  // Copies blocks' keys and values (and scales) in every layer: the
  // copy-on-write of a shared block, done before the forward that writes it.
  virtual Status copyBlocks(std::span<const BlockCopy> copies) = 0;
  // Moves token slots' keys and values in every layer (speculative
  // decoding's accepted tree nodes into place), before the next forward.
  virtual Status copySlots(std::span<const SlotCopy> copies) { return blockPool().copySlots(copies); }
  // Speculative verify (the plan's verify entry; tree_verify.h): the nodes
  // its tree holds, root included (0: the backend runs no verify entry),
  // its longest path in draft tokens, and the call itself: logits
  // [N, vocab], accepted [B, verifyTreeDepth() + 1], count [B].
  virtual int64_t verifyTreeNodes() const { return 0; }
  virtual int64_t verifyTreeDepth() const { return 0; }
  virtual Status verify(const BatchInputs&, std::span<float>, std::span<int32_t>, std::span<int32_t>) {
    return makeError("this backend runs no verify entry");
  }
  // LayerSkip self-draft (the plan's draft entry, kiln-compile
  // --spec-layerskip K): the verify entry's inputs through the first
  // draftLayers() layers, then the final norm and LM head; logits [N, vocab].
  virtual int64_t draftLayers() const { return 0; }
  virtual Status draft(const BatchInputs&, std::span<float>) {
    return makeError("this backend runs no draft entry");
  }
  // The target's last hidden state (the LM head's input) of the latest
  // forward or verify, a row per logits row, valid until the next call;
  // empty where the backend shows none. lmHead runs the LM head alone over
  // the caller's rows. For drafters that read the target's hidden states.
  virtual std::span<const float> lastHidden() const { return {}; }
  virtual int64_t hiddenSize() const { return 0; }
  virtual Status lmHead(std::span<const float>, int64_t, std::span<float>) {
    return makeError("this backend runs no LM head alone");
  }
  virtual int64_t vocabSize() const = 0;
  virtual int64_t maxTokens() const = 0;
  virtual std::string name() const = 0;
  // Whether the attention kernels read only the keys inside each layer's
  // sliding window (the manifest's kv_cache.sliding_windows), so that
  // blocks wholly before it may be released and reused.
  virtual bool honorsSlidingWindows() const { return false; }
};

// An executor with forward, blockPool, vocabSize and maxTokens (and, if it
// has one, forwardGreedy) as a Backend.
template <class Executor>
class ExecutorBackend final : public Backend {
 public:
  ExecutorBackend(std::unique_ptr<Executor> ex, std::string name, bool greedy_on_device = false,
                  bool honors_sliding_windows = false)
      : ex_(std::move(ex)),
        name_(std::move(name)),
        greedy_on_device_(greedy_on_device),
        honors_sliding_windows_(honors_sliding_windows) {}
  Status forward(const BatchInputs& in, std::span<float> logits) override {
    return ex_->forward(in, logits);
  }
  bool greedyOnDevice() const override {
    if constexpr (kHasGreedy) return greedy_on_device_;
    return false;
  }
  Status forwardGreedy(const BatchInputs& in, std::span<int32_t> tokens) override {
    if constexpr (kHasGreedy) return ex_->forwardGreedy(in, tokens);
    return Backend::forwardGreedy(in, tokens);
  }
  BlockPool& blockPool() override { return ex_->blockPool(); }
  StatePool* statePool() override {
    if constexpr (requires(Executor& e) { e.statePool(); }) return ex_->statePool();
    return nullptr;
  }
  // Executors that keep the pools in host memory leave the copy to it.
  Status copyBlocks(std::span<const BlockCopy> copies) override {
    if constexpr (requires(Executor& e) { e.copyBlocks(copies); }) return ex_->copyBlocks(copies);
    return ex_->blockPool().copyBlocks(copies);
  }
  Status copySlots(std::span<const SlotCopy> copies) override {
    if constexpr (requires(Executor& e) { e.copySlots(copies); }) return ex_->copySlots(copies);
    return ex_->blockPool().copySlots(copies);
  }
  int64_t verifyTreeNodes() const override {
    if constexpr (kHasVerify) return ex_->treeNodes();
    return 0;
  }
  int64_t verifyTreeDepth() const override {
    if constexpr (kHasVerify) return ex_->treeDepth();
    return 0;
  }
  Status verify(const BatchInputs& in, std::span<float> logits, std::span<int32_t> accepted,
                std::span<int32_t> count) override {
    if constexpr (kHasVerify) return ex_->verify(in, logits, accepted, count);
    return Backend::verify(in, logits, accepted, count);
  }
  int64_t draftLayers() const override {
    if constexpr (kHasDraft) return ex_->draftLayers();
    return 0;
  }
  Status draft(const BatchInputs& in, std::span<float> logits) override {
    if constexpr (kHasDraft) return ex_->draft(in, logits);
    return Backend::draft(in, logits);
  }
  std::span<const float> lastHidden() const override {
    if constexpr (kHasHidden) return ex_->lastHidden();
    return {};
  }
  int64_t hiddenSize() const override {
    if constexpr (kHasHidden) return ex_->hiddenSize();
    return 0;
  }
  Status lmHead(std::span<const float> hidden, int64_t rows, std::span<float> logits) override {
    if constexpr (kHasHidden) return ex_->lmHead(hidden, rows, logits);
    return Backend::lmHead(hidden, rows, logits);
  }
  int64_t vocabSize() const override { return ex_->vocabSize(); }
  int64_t maxTokens() const override { return ex_->maxTokens(); }
  std::string name() const override { return name_; }
  bool honorsSlidingWindows() const override { return honors_sliding_windows_; }

 private:
  static constexpr bool kHasVerify = requires(Executor& e, const BatchInputs& in, std::span<float> l,
                                              std::span<int32_t> a) { e.verify(in, l, a, a); };
  static constexpr bool kHasDraft =
      requires(Executor& e, const BatchInputs& in, std::span<float> l) { e.draft(in, l); };
  static constexpr bool kHasHidden = requires(Executor& e, std::span<const float> h, std::span<float> l) {
    e.lastHidden();
    e.lmHead(h, int64_t(1), l);
  };
  static constexpr bool kHasGreedy =
      requires(Executor& e, const BatchInputs& in, std::span<int32_t> t) { e.forwardGreedy(in, t); };
  std::unique_ptr<Executor> ex_;
  std::string name_;
  bool greedy_on_device_ = false;
  bool honors_sliding_windows_ = false;
};

}  // namespace kiln
