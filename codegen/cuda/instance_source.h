// CUDA kernel instances from manifest steps, without MLIR: for one step's
// kernel kind and params, the few-line readable .cu that includes the kind's
// template from codegen/kernels, spells its configuration as a `Config`
// struct of constants, and defines one `extern "C" __global__` entry named by
// the instance. Both kiln-compile (artifact kernels/*.cu) and the runtime /
// kiln-kernels (regenerating a missing file) use it.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/cuda/artifact_kernels.h"
#include "runtime/support/error.h"

namespace kiln::cuda_codegen {

// How an instance is launched: the runtime's launcher and kiln-kernels'
// resource report read it from here.
struct LaunchShape {
  int block_threads = 0;
  std::string grid;          // in terms of the step's runtime sizes, e.g. "[N, kv_heads=8, splits]"
  std::string params_struct; // kiln::kernels::<Name>Params, the entry's only argument
};

struct Instance {
  std::string name;
  std::string kind;
  std::string source;  // the .cu text
  LaunchShape launch;
  // The target it needs beyond kiln's sm_90 baseline: "sm_90a" for the
  // wgmma kernels (arch-specific Hopper instructions); "" for any.
  std::string arch;
};

// Kinds with a CUDA template: the manifest's kernel kinds (embedding, rms_norm,
// residual_rms_norm, gemm, rope_kv_append, paged_attention, silu_mul, add, mul,
// silu, relu_squared, kv_append, gather_last_tokens, moe_router, ssm_conv1d,
// ssd_scan, ssm_gated_norm, selective_scan) plus the runtime's own: paged_attention_split,
// attention_combine, flash_attention, flash_attention_wgmma, decode_attention,
// moe_gate_up, moe_down, moe_combine and the grouped moe_gate_up_mma, moe_down_mma
// (a moe_ffn step's), sample, argmax, and the 2:4 sparse linears' sparse24_gemv,
// sparse24_gemm, sparse24_gemm_wgmma.
const std::vector<std::string_view>& cudaKernelKinds();

// A readable instance name from kind and params (kind, then each param as
// _<name><value> in key order; '.' -> 'p', '-' -> 'm'). Manifests carry the
// compiler's name for each step; this is for instances the runtime adds.
std::string instanceName(std::string_view kind, const nlohmann::json& params);

// The instance for one step. An unknown kind, a missing or ill-typed param, or
// a value the template cannot take is an error naming the kind and param.
Result<Instance> instanceSource(std::string_view kind, const nlohmann::json& params,
                                std::string_view name);
Result<std::string> instanceSource(std::string_view kind, const nlohmann::json& params);

// Whether a gemm of n rows of k (bf16 on the GPU) has a streamed single-row
// instance (gemv_stream.cuh): rows of whole 2048-column chunks, W at most
// 256 MiB. The LM head's 1 GB stays on gemv.cuh, at the HBM ceiling already.
bool streamsSingleRowGemm(int64_t n, int64_t k);
// The streamed instances' dynamic shared memory (128 KiB of ring and its
// barriers): a device whose blocks cannot opt into that much (sm_120's
// 99 KiB) runs gemv.cuh instead.
int64_t gemvStreamSharedBytes();

// An int constant of a generated instance's Config, as the runtime reads its
// launch from it ("static constexpr int kSmemBytes = 98304;"), or `fallback`
// when the Config names none.
int configConstant(const std::string& source, std::string_view name, int fallback);

}  // namespace kiln::cuda_codegen
