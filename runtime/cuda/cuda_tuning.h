// The CUDA backend's optimizations that a user may switch off for an A/B
// measurement in the same session (kiln bench's --no-* flags; the list and
// what each one changes is in docs/design/runtime.md). One struct, filled by
// the CLI, carried unchanged through EngineOptions into the executor.
// Defaults are the fast path; no field changes results beyond rounding.
// The kernel switches (flash_attention, stream_gemv, fold_norms,
// residual_epilogue, fused_swiglu) are the features the plan's kernel
// variants need (runtime/artifact/kernel_variant.h): off, the backend takes
// each role's next alternative in the plan.
#pragma once

namespace kiln::cuda {

struct CudaTuning {
  // Replay decode batches (one token per sequence) from a CUDA graph
  // captured per shape (batch size, block-table stride, split-KV count),
  // and speculative verify batches from one per shape (tokens, rows,
  // block-table stride, largest tree) seen twice.
  bool graphs = true;
  // Prefill chunks of bf16 pools with head_dim 64 or 128 run the
  // tensor-core flash attention; otherwise the CUDA-core paged_attention.
  bool flash_attention = true;
  // sm_90+: each kernel is a programmatic dependent of the previous one
  // (codegen/kernels/common.cuh), so its launch and weight reads overlap
  // the previous kernel's tail.
  bool programmatic_launch = true;
  // Time cuBLASLt's candidate algorithms for decode-sized GEMMs and keep
  // the fastest; otherwise its first heuristic choice.
  bool gemm_autotune = true;
  // sm_90+: batch-1 decode's GEMVs stream their weights through a
  // bulk-copy ring (codegen/kernels/gemv_stream.cuh).
  bool stream_gemv = true;
  // ... with the residual_rms_norm before qkv and gate/up folded into them
  // (codegen/cuda/skinny_fusion.h); its variants also need stream_gemv.
  bool fold_norms = true;
  // Decode batches cuBLASLt runs add the residual in its epilogue, so the
  // residual_rms_norm after o_proj and down only normalizes.
  bool residual_epilogue = true;
  // Prefill-sized batches run the gate/up projection with its SwiGLU as
  // one kernel on Hopper (gemm_swiglu_wgmma), not cuBLASLt and silu_mul.
  bool fused_swiglu = true;
  // Greedy batches take each row's argmax on the GPU and copy back ids,
  // not logits (false: logits back and the host sampler).
  bool device_argmax = true;
  // Every row's result independent of the batch around it (a request's
  // greedy tokens the same alone and among others): each step runs the one
  // kernel that takes every row count (no skinny GEMMs, fused epilogues,
  // split-KV or flash attention), and cuBLASLt one algorithm per GEMM shape
  // for all row counts, without split-K. Slower; off by default.
  bool batch_invariant = false;
  // Time every step between CUDA events (no graphs, no overlap: where the
  // time goes, not speed figures) and print the per-instance table to
  // stderr when the executor is destroyed.
  bool profile_steps = false;
  // Time each forward on the GPU (input copy to output copy) and print the
  // averages by kind and token count to stderr when the executor is
  // destroyed.
  bool report_forward_gpu_time = false;
};

}  // namespace kiln::cuda
