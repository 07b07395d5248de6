// The kernel instances the CUDA runtime compiles for one manifest step. The
// manifest names one instance per step; the runtime may run others in its
// place or beside it, chosen by the batch at run time:
//   - gemm: the skinny GEMM with bf16 weights (the runtime converts float
//     weights to bf16 at load), whatever weight type the manifest names;
//     and where skinnyFusions (skinny_fusion.h) folds neighbours into it,
//     the fused variant skinny batches run; and of both, the single-row
//     instances (gemv_max_rows 1) batches of one row run;
//   - causal paged_attention: the step's CUDA-core kernel (tiny contexts),
//     decode_attention (split-KV decode) with attention_combine, and for
//     bf16 pools at head_dim 64 or 128 the tensor-core flash_attention
//     (prefill), flash_attention_wgmma on Hopper;
//   - residual_rms_norm whose sum the gemm before it writes in cuBLASLt
//     batches (skinny_fusion.h): the rms_norm over that sum.
// An f32 plan (StepInstanceOptions::activation_type) gets f32 instances:
// none for gemm (cuBLASLt in f32 at every batch size), and for attention
// the CUDA-core kernel and its split mode with attention_combine.
// Besides the steps, the entry's logits get the greedy argmax (greedyInstance).
// The executor compiles exactly this list and kiln-kernels shows it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/artifact/manifest.h"
#include "runtime/support/error.h"

namespace kiln::cuda_codegen {

enum class InstanceRole {
  kStep, kDecode, kCombine, kPrefill, kGreedy, kFused, kSingleRow, kFusedSingleRow, kNormOfSum, kFusedPrefill
};
// "step", "decode", "combine", "prefill", "greedy", "fused", "single_row", "fused_single_row", "norm_of_sum",
// "fused_prefill"
const char* instanceRoleName(InstanceRole role);

struct StepInstance {
  InstanceRole role = InstanceRole::kStep;
  std::string kind;
  nlohmann::json params;
  std::string name;  // a valid kernel symbol, short enough for the JIT cache's files
};

struct StepInstanceOptions {
  bool flash_attention = true;  // offer the tensor-core prefill kernel
  // The target has Hopper's warpgroup tensor cores (sm_90a): the prefill
  // kernel is flash_attention_wgmma, else flash_attention (mma.sync).
  bool wgmma = true;
  // The single-row gemm instances stream W through a bulk-copy ring where
  // it fits (gemv_stream.cuh, param gemv_stream, added only for the shapes
  // streamsSingleRowGemm takes): an sm_90 target.
  bool stream_gemv = true;
  // gemm: SkinnyFusion::single_row_params, the folded norm's params for its
  // streamed single-row instance (null: none; needs stream_gemv).
  nlohmann::json single_row_fusion;
  // gemm with SwiGLU folded in (skinny_fusion's silu_mul) on a wgmma
  // target: offer gemm_swiglu where its tiles divide the shape.
  bool fused_prefill = true;
  // gemm: SkinnyFusion::gemm_params, the fused variant's extra params (null: none).
  nlohmann::json skinny_fusion;
  // residual_rms_norm: SkinnyFusion::norm_of_sum_params, the rms_norm that
  // cuBLASLt batches run over the sum the gemm before wrote (null: none).
  nlohmann::json norm_of_sum;
  // The manifest's activation_type: "bf16", or "f32" (vLLM's --dtype
  // float32: every activation, the logits and the GEMMs in f32).
  std::string activation_type = "bf16";
};

// The step's own kernel keeps the plan's instance name where the runtime
// does not change its params.
Result<std::vector<StepInstance>> stepInstances(const Step& step, const StepInstanceOptions& options = {});

// The argmax over the `forward` entry's logits ([rows, vocab] of
// logits_type, bf16 or f32) that greedy batches run instead of copying the
// logits back.
StepInstance greedyInstance(int64_t vocab, std::string_view logits_type);

// Whether a device of `arch` ("sm_90", "sm_80", ...) runs the wgmma kernels
// (StepInstanceOptions::wgmma): Hopper, 9.0, whose instances are then all
// compiled for the arch-specific sm_90a.
bool warpgroupMmaTarget(std::string_view arch);

// Whether a device of `arch` has sm_90's bulk copies and their barriers
// (StepInstanceOptions::stream_gemv): 9.0 and later.
bool bulkCopyTarget(std::string_view arch);

// Names above 160 characters keep their first 96 and gain a hash of the
// whole: kernel symbols may be long, the JIT cache's file names may not.
std::string boundedInstanceName(const std::string& name);

}  // namespace kiln::cuda_codegen
