// What a user chooses when a model is compiled into a plan: one default and
// one validation for each option, shared by kiln-compile's flags, the
// kiln-opt pipeline's options, the passes' own options and the kiln CLI's
// compile cache (which passes the flags on to kiln-compile). MLIR-free, so
// the runtime side can read it too.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "runtime/support/error.h"

namespace kiln {

struct PlanOptions {
  static constexpr unsigned kDefaultPageSize = 16;
  static constexpr unsigned kMaxPageSize = 256;
  static constexpr unsigned kDefaultQuantGroupSize = 128;
  static constexpr std::string_view kDefaultQuantWeights = "none";
  static constexpr std::string_view kDefaultQuantKv = "none";
  static constexpr std::string_view kDefaultSparsity = "none";
  static constexpr std::string_view kDefaultSparsityMethod = "magnitude";
  static constexpr std::string_view kDefaultSpecTree = "none";
  static constexpr std::string_view kDefaultSpecMode = "greedy";
  static constexpr std::string_view kDefaultActivationType = "f32";
  static constexpr std::string_view kDefaultTarget = "sm_90a";
  static constexpr unsigned kDefaultTensorParallel = 1;
  static constexpr unsigned kDefaultPipelineParallel = 1;

  std::string quant_weights{kDefaultQuantWeights};  // none | int8 | int4 | fp8
  unsigned quant_group_size = kDefaultQuantGroupSize;  // int4 only
  std::string quant_kv{kDefaultQuantKv};            // none | f16 | bf16 | int8 | fp8
  unsigned page_size = kDefaultPageSize;            // tokens per KV block
  // 2:4 structured sparsity of the decoder linears (xfmr-sparsify,
  // docs/design/sparsity.md): none | 2:4; how the kept weights were chosen:
  // magnitude (at load) | sparsegpt (pruned before the compile, on
  // calibration text).
  std::string sparsity{kDefaultSparsity};
  std::string sparsity_method{kDefaultSparsityMethod};
  std::string spec_tree{kDefaultSpecTree};          // none | chain:K | widths:W1,W2,...
  std::string spec_mode{kDefaultSpecMode};          // greedy | rejection
  // A LayerSkip self-draft entry (@draft): the first K layers, then the
  // final norm and LM head (0: none; needs spec_tree).
  unsigned spec_layerskip = 0;
  // The import's activation type: kernel params name the element type of
  // every activation operand or result that differs from it.
  std::string activation_type{kDefaultActivationType};  // f32 | bf16 | f16
  // The device the CUDA kernel variants are chosen for (xfmr-select-kernels):
  // an sm_XY architecture, sm_90a for Hopper's wgmma kernels, or cpu for a
  // plan only the CPU backend runs.
  std::string target{kDefaultTarget};
  // Cut the forward entry into the megakernel's tasks (xfmr-plan-megakernel,
  // docs/design/megakernel.md): its "megakernel" section. Off by default
  // until the CUDA backend runs it.
  bool megakernel = false;
  // Tensor parallelism (xfmr-shard-tensor-parallel): ranks that split each
  // layer's heads and MLP features; pipeline parallelism
  // (xfmr-split-pipeline-stages): stages that split the layer stack
  // (docs/design/parallelism.md). One plan is for one rank: its shard
  // tp_rank < tensor_parallel of stage pp_stage < pipeline_parallel.
  unsigned tensor_parallel = kDefaultTensorParallel;
  unsigned pipeline_parallel = kDefaultPipelineParallel;
  unsigned tp_rank = 0;
  unsigned pp_stage = 0;
};

// Every option's value; the error names the kiln-compile flag and lists
// what it accepts: "invalid value '24' for --page-size, expected a power of
// two from 1 to 256".
Status validatePlanOptions(const PlanOptions& options);
// The page size alone; `option` is its spelling where it was given
// (xfmr-page-kv-cache checks its own `page-size` with it).
Status validatePageSize(unsigned page_size, std::string_view option = "--page-size");
// The KV cache type alone, likewise (xfmr-insert-quantization's `kv`).
Status validateQuantKv(const std::string& kv, std::string_view option = "--quant-kv");
// The sparsity pattern and method alone, likewise (xfmr-sparsify's
// `pattern` and `method`).
Status validateSparsity(const std::string& sparsity, const std::string& method,
                        std::string_view option = "--sparsity",
                        std::string_view method_option = "--sparsity-method");
// The parallel layout alone: positive sizes, this plan's rank and stage
// inside them, and the options a multi-rank plan does not take.
Status validateParallelism(const PlanOptions& options);
// The target alone, likewise.
Status validateTarget(const std::string& target, std::string_view option = "--target");
// The target to compile for a device of compute capability major.minor:
// sm_90a on Hopper (9.0), else the newest listed target it runs; none below
// sm_80.
std::optional<std::string> targetForDevice(int major, int minor);
// The targets kiln chooses kernels for, as --help lists them.
inline constexpr std::string_view kTargets = "cpu, sm_80, sm_86, sm_89, sm_90, sm_90a, sm_100, sm_120";

}  // namespace kiln
