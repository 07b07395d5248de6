// The CUDA backend's executor: runs an artifact's `forward` entry on one GPU
// with the same contract as cpu::CpuExecutor (same manifest, step kinds and
// BatchInputs). At creation it uploads the weights into one device
// allocation (GEMM weights as bf16, norm weights as f32, embedding tables as
// bound), allocates one arena (bytes_per_token x T_max) and the paged KV
// pools, JIT-compiles every step's kernel instance (NVRTC, on-disk cache) and
// resolves every step's launch arguments. forward() copies the batch inputs
// through pinned staging, launches the steps on one stream (GEMMs: the
// skinny `gemm` kernel for <= 8 rows, cuBLASLt bf16 with f32 accumulation
// above), and copies the logits back as f32, or for greedy batches only
// each row's argmax. An f32 artifact (activation_type f32) runs in f32
// throughout instead: f32 GEMM weights, every GEMM in cuBLASLt with f32
// operands and CUBLAS_COMPUTE_32F, no skinny kernel or fusion. Decode batches split attention
// over the keys (split-KV) and replay a CUDA graph captured for their shape.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "runtime/artifact/manifest.h"
#include "runtime/cpu/executor/executor.h"  // BatchInputs, kvPoolConfigFor
#include "runtime/kv/block_pool.h"
#include "runtime/support/error.h"
#include "runtime/weights/weight_store.h"

namespace kiln::cuda {

struct LaunchShape;  // launch_shape.h

struct CudaExecutorOptions {
  int device = 0;
  bool progress = true;  // JIT progress bar on stderr
  bool verbose = false;  // print the loaded libraries, device and memory use
  // Replay decode batches (one token per sequence) from a CUDA graph
  // captured per shape (batch size, block-table stride, split-KV count).
  bool cuda_graphs = true;
  // Prefill chunks of bf16 pools with head_dim 64 or 128 run the
  // tensor-core flash_attention; otherwise the CUDA-core paged_attention.
  bool flash_attention = true;
  // sm_90+: launch each kernel as a programmatic dependent of the previous
  // one (codegen/kernels/common.cuh), so launches and weight reads overlap
  // the previous kernel's tail.
  bool programmatic_launch = true;
  // Time cuBLASLt's candidate algorithms for decode-sized GEMMs (more than
  // the skinny GEMM's rows, at most 512) and keep the fastest; otherwise its
  // first heuristic choice.
  bool gemm_autotune = true;
  // sm_90+: batch-1 decode's GEMVs stream their weights through a bulk-copy
  // ring (codegen/kernels/gemv_stream.cuh); false for A/B measurements.
  bool stream_gemv = true;
  // ... with the residual_rms_norm before qkv and gate/up folded into them
  // (codegen/cuda/skinny_fusion.h); false for A/B measurements.
  bool fold_norms = true;
  // Decode batches cuBLASLt runs (9 to 512 rows): the o_proj and down GEMMs
  // add their product to the f32 residual stream in the epilogue and write
  // the sum, so the residual_rms_norm after them only normalizes
  // (codegen/cuda/skinny_fusion.h); false for A/B measurements.
  bool residual_epilogue = true;
  // Batches of at least kFusedSwiGluMinRows rows (prefill) run the gate/up
  // projection with its SwiGLU as one kernel on Hopper (gemm_swiglu_wgmma)
  // instead of cuBLASLt and silu_mul; false for A/B measurements.
  bool fused_swiglu = true;
  // Time every step between CUDA events (no graphs, no overlap: for finding
  // where the time goes, not for speed figures) and print the per-instance
  // table (StepProfile) to stderr when the executor is destroyed.
  bool profile_steps = false;
  // Time each forward on the GPU, from its input copy to its output copy,
  // between two CUDA events, and print the averages beside the counts to
  // stderr when the executor is destroyed: decode forwards replayed from a
  // graph, and forwards launched step by step by token count (those that
  // made no new GEMM plan). What the GPU spends of a step's wall time; the
  // rest is the host's.
  bool report_forward_gpu_time = false;
  // > 0: the KV pool takes what is left of this fraction of the GPU's memory
  // once weights, arena and scratch are allocated (kv.num_blocks is then
  // ignored); too little left is an error saying how much.
  double gpu_memory_fraction = 0;
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
  Status forward(const cpu::BatchInputs& in, std::span<float> logits_out);
  // Runs `forward` and each logits row's argmax on the GPU (largest logit,
  // NaN ignored, lowest id on ties: sampling::Sampler's greedy rule), so
  // only tokens_out ([B] ids) comes back. Same batch checks as forward.
  Status forwardGreedy(const cpu::BatchInputs& in, std::span<int32_t> tokens_out);

  BlockPool& blockPool() { return *pool_; }
  int64_t vocabSize() const { return vocab_; }
  int64_t maxTokens() const { return max_tokens_; }
  // "NVIDIA H200 (sm_90)".
  const std::string& deviceName() const { return device_name_; }
  int64_t deviceBytes() const { return device_bytes_; }  // weights + arena + pools + staging
  int64_t weightBytes() const { return weight_bytes_; }
  int64_t graphCaptures() const;  // decode graphs captured so far

  struct State;  // driver objects, bound steps (executor.cc)

 private:
  CudaExecutor() = default;
  // `out_values`: what the caller's output holds, in logits floats.
  Status checkBatch(const cpu::BatchInputs& in, size_t out_values) const;
  // Stages the inputs and launches the forward (graph or steps) for `in`,
  // ending in the argmax when `greedy`; nothing is synchronized. Returns the
  // shape launched.
  Result<LaunchShape> launchForward(const cpu::BatchInputs& in, bool greedy);

  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<State> state_;
  int64_t max_tokens_ = 0;
  int64_t vocab_ = 0;
  bool logits_per_sequence_ = true;
  std::string device_name_;
  int64_t device_bytes_ = 0;
  int64_t weight_bytes_ = 0;
};

}  // namespace kiln::cuda
