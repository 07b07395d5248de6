// The CUDA backend's executor: runs an artifact's `forward` entry on one GPU
// with the same contract as the CPU executor (same manifest, step kinds and
// BatchInputs). At creation it uploads the weights into one device
// allocation (GEMM weights as bf16, norm weights as f32, embedding tables as
// bound), allocates one arena (bytes_per_token x T_max), the paged KV
// pools and, for state-space plans, the state slots' pools, JIT-compiles every step's kernel instances (NVRTC, on-disk cache)
// and resolves every step's launch arguments. forward() copies the batch
// inputs through pinned staging, launches the steps on one stream (GEMMs:
// skinny kernels for <= 8 rows, cuBLASLt bf16 with f32 accumulation above,
// gemm_dispatch.h says which), and copies the logits back as f32, or for
// greedy batches only each row's argmax. An f32 artifact (activation_type
// f32) runs in f32 throughout instead: f32 GEMM weights, every GEMM in
// cuBLASLt with f32 operands and CUBLAS_COMPUTE_32F, no skinny kernel or
// fusion. Decode batches split attention over the keys (split-KV) and
// replay a CUDA graph captured for their shape; verify batches replay one
// of their own.
//
// The parts, a file pair each beside this one: device_context (driver,
// device, context, stream), device_memory (allocations, arena, KV pools,
// batch inputs), weight_forms (which weight in which form, the upload),
// kernel_set (instances, JIT, modules), bound_step (steps bound to all
// that), gemm_dispatch / gemm_planner / gemm_step (which GEMM kernel,
// cuBLASLt's plans, the gemm launch), attention, greedy_argmax, launcher
// (launches, decode graphs) and forward_timer (the timing reports).
// executor.cc makes them in order and runs the forward over them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "runtime/artifact/manifest.h"
#include "runtime/backend/batch.h"
#include "runtime/cuda/cuda_tuning.h"
#include "runtime/kv/block_pool.h"
#include "runtime/kv/state_pool.h"
#include "runtime/support/error.h"
#include "runtime/weights/weight_store.h"

namespace kiln::cuda {

struct LaunchShape;  // launch_shape.h

struct CudaExecutorOptions {
  int device = 0;
  bool progress = true;  // JIT progress bar on stderr
  bool verbose = false;  // print the loaded libraries, device and memory use
  CudaTuning tuning;  // the A/B switches (cuda_tuning.h)
  // > 0: the KV pool takes what is left of this fraction of the GPU's memory
  // once weights, arena and scratch are allocated (kv.num_blocks is then
  // ignored); too little left is an error saying how much.
  double gpu_memory_fraction = 0;
  // A plan with state-space layers (the manifest's state_cache): the state
  // slots, one per sequence run at once (the engine's max_sequences); each
  // is that many slots of every SSM layer's conv and SSM state on the GPU.
  int64_t state_slots = 0;
};

class CudaExecutor {
 public:
  // `weights` is read only during create (everything is copied to the GPU).
  // `kv` must match the manifest's kv_cache; the executor keeps a host
  // BlockPool for block bookkeeping and the K/V pools themselves on the
  // device. No driver, no GPU, out of memory or a kernel that does not
  // compile: an error naming what is missing (memory: asked and free).
  static Result<std::unique_ptr<CudaExecutor>> create(const Manifest& manifest,
                                                      const WeightStore& weights,
                                                      const KvPoolConfig& kv, int64_t max_tokens,
                                                      const CudaExecutorOptions& options = {});
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  // Runs `forward`. logits_out: [B, vocab] f32, each sequence's last-token
  // logits. A bad batch is an error before anything is launched.
  Status forward(const BatchInputs& in, std::span<float> logits_out);
  // Runs `forward` and each logits row's argmax on the GPU (largest logit,
  // NaN ignored, lowest id on ties: sampling::Sampler's greedy rule), so
  // only tokens_out ([B] ids) comes back. Same batch checks as forward.
  Status forwardGreedy(const BatchInputs& in, std::span<int32_t> tokens_out);

  // Runs `verify` (a plan compiled with kiln-compile --spec-tree), with the
  // CPU executor's contract (runtime/backend/tree_verify.h): row b of the
  // batch is sequence b's draft tree (BatchInputs::parents,
  // base_positions), whose positions and ancestor mask are computed on the
  // host and staged with the inputs; the steps, the tree-masked
  // paged_attention among them, run one by one at a shape's first call and
  // from a CUDA graph of that shape after (CudaTuning::graphs; one capture,
  // at the second call). logits_out: [N, vocab] f32,
  // a row per node; empty: the logits stay on the device. accepted_out:
  // [B, treeDepth() + 1] the greedy path's local nodes (-1 padded),
  // count_out [B] its drafts, walked on the host over each node's argmax
  // computed on the GPU (forwardGreedy's rule).
  Status verify(const BatchInputs& in, std::span<float> logits_out, std::span<int32_t> accepted_out,
                std::span<int32_t> count_out);
  // Nodes of the verify entry's tree, root included (0: none), and its
  // longest path in drafts.
  int64_t treeNodes() const;
  int64_t treeDepth() const;
  // Runs `draft` (kiln-compile --spec-layerskip K): verify's inputs and
  // staging through the first draftLayers() layers, then the final norm
  // and LM head, step by step; logits_out [N, vocab] f32, a row per node.
  Status draft(const BatchInputs& in, std::span<float> logits_out);
  int64_t draftLayers() const;  // 0: no draft entry

  // The LM head's input rows of the latest forward or verify (forward: a
  // row per logits row; verify: a row per tree node) as f32, copied back on
  // the first call after it and valid until the next forward or verify;
  // empty (the reason on stderr) if the copy fails. For draft heads that
  // predict from the target's hidden state (runtime/spec/draft_head.h).
  std::span<const float> lastHidden() const;
  int64_t hiddenSize() const;
  // The forward's LM head alone (its gemm step) over `rows` caller rows
  // (hidden [rows, hiddenSize()] -> logits [rows, vocab] f32), rows at most
  // maxTokens(). Reuses the forward's LM-head input and logits buffers, so
  // it keeps lastHidden() by copying it back first.
  Status lmHead(std::span<const float> hidden, int64_t rows, std::span<float> logits);

  BlockPool& blockPool() { return *pool_; }
  // The state-space layers' slot bookkeeping (the states themselves are on
  // the GPU); null for a plan without them. A batch names each sequence's
  // slot in BatchInputs::state_slots; a sequence whose rows start at
  // position 0 gets its slot zeroed on the stream before the steps.
  StatePool* statePool() { return state_pool_.get(); }
  // Copies blocks' keys, values and scales in every layer's device pools,
  // on the stream, ahead of the next forward (copy on write).
  Status copyBlocks(std::span<const BlockCopy> copies);
  // Moves token slots' keys, values and (int8/fp8 pools) scales in every
  // layer, in order, on the stream, ahead of the next forward: verify's
  // accepted nodes into the slots of their depths.
  Status copySlots(std::span<const SlotCopy> copies);
  int64_t vocabSize() const { return vocab_; }
  int64_t maxTokens() const { return max_tokens_; }
  // "NVIDIA H200 (sm_90)".
  const std::string& deviceName() const { return device_name_; }
  int64_t deviceBytes() const { return device_bytes_; }  // weights + arena + pools + staging
  int64_t weightBytes() const { return weight_bytes_; }
  int64_t graphCaptures() const;  // decode and verify graphs captured so far

 private:
  CudaExecutor() = default;
  // `out_values`: what the caller's output holds, in logits floats.
  Status checkBatch(const BatchInputs& in, size_t out_values) const;
  // Checks a verify batch and the outputs' sizes.
  Status checkVerify(const BatchInputs& in, size_t logits_values, size_t accepted, size_t counts) const;
  // Stages the inputs and launches the forward (graph or steps) for `in`,
  // ending in the argmax when `greedy`; nothing is synchronized. Returns the
  // shape launched.
  Result<LaunchShape> launchForward(const BatchInputs& in, bool greedy);

  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<StatePool> state_pool_;
  // What it holds on the device: the owners of the driver objects and
  // memory, the kernels, the bound steps (executor.cc).
  struct Backend;
  std::unique_ptr<Backend> backend_;
  int64_t max_tokens_ = 0;
  int64_t vocab_ = 0;
  bool logits_per_sequence_ = true;
  std::string device_name_;
  int64_t device_bytes_ = 0;
  int64_t weight_bytes_ = 0;
};

}  // namespace kiln::cuda
