// Which kernels the CUDA backend may run for each step of an entry, by the
// batch's row count, for one target: the choice xfmr-select-kernels records
// in the IR and the plan (runtime/artifact/kernel_variant.h). MLIR-free, so
// the pass and the tests ask the same code.
//
// For a bf16 plan:
//   - gemm: up to kSkinnyMaxRows rows a skinny GEMM (gemv.cuh), fused with
//     the silu_mul or rope_kv_append after it where skinny_fusion.h allows;
//     for one row its single-row instance, streamed on sm_90+ where the
//     shape streams (gemv_stream.cuh), folding in the residual_rms_norm
//     before it where allowed; from kFusedSwiGluMinRows rows on Hopper,
//     gemm_swiglu for a gemm with SwiGLU folded in; otherwise cuBLASLt, up to
//     kResidualEpilogueMaxRows adding the residual of the norm after it; a
//     shape the skinny kernels do not tile (k not a multiple of 8) runs on
//     cuBLASLt at every row count;
//   - gemm of ggml blocks (q4_0, q4_1, q8_0, the K-quants q4_k, q5_k, q6_k,
//     and kiln's int8/int4 as the
//     q8_0/q4_0 blocks the weight store makes): gemm_quant.cuh reads their
//     tensor-core tiles up to kQuantGemmMaxRows rows (one 8-row x tile a
//     block up to 8 rows, two beyond); cuBLASLt batches expand the weight
//     to bf16 first (dequantize);
//   - paged_attention: the CUDA-core kernel, decode_attention (split-KV
//     decode) and its combine, and for bf16 pools at head_dim 64 or 128 the
//     tensor-core flash attention from kFlashMinQuery query rows (wgmma on
//     Hopper);
//   - gemm of a 2:4 sparse weight (sp24, int8sp24, int4sp24: xfmr-sparsify)
//     on sm_80 and later: sparse24_gemv up to kSkinnyMaxRows rows, reading
//     the kept values as the plan stores them (bf16, q8_0, q4_0), and above
//     that the sparse tensor-core GEMM over bf16 kept values (sparse wgmma
//     on Hopper where k % 128 == 0, else mma.sp); no fusions (they read
//     dense weights). Below sm_80 the weight is expanded to a dense bf16
//     matrix at load for cuBLASLt (sparse24RunsDense says why);
//   - the steps the gemms absorb say where: absorbed, absorbed_prefill,
//     folded_into_next, norm_of_sum.
// An f32 plan (vLLM's --dtype float32) runs its GEMMs on cuBLASLt in f32 at
// every row count and each other step's instance with its activation types
// named; attention adds the CUDA-core kernel's split mode and combine; a
// 2:4 sparse weight is expanded to a dense f32 matrix at load.
// A split is a strided copy: no variants. Speculative verify's index steps
// (tree_positions, tree_mask, accept) run on the host: no variants; its
// paged_attention with a tree mask runs the CUDA-core kernel alone.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/cuda/skinny_fusion.h"
#include "runtime/artifact/kernel_variant.h"
#include "runtime/support/error.h"

namespace kiln::cuda_codegen {

// The row thresholds, in one place.
// Skinny GEMMs take up to this many rows (a decode batch of 8).
constexpr int64_t kSkinnyMaxRows = 8;
// gemm_quant (block-quantized weights on the tensor cores) up to here;
// larger batches expand the weight to bf16 for cuBLASLt.
constexpr int64_t kQuantGemmMaxRows = 64;
// gemm_swiglu from here up: about as fast as cuBLASLt and silu_mul, and
// closer to float (gate/up never rounded to bf16).
constexpr int64_t kFusedSwiGluMinRows = 1024;
// cuBLASLt adds the norm's residual only in decode-sized batches (whose
// algorithm the runtime times); at prefill sizes f32 C and D cost more
// than the norm saves.
constexpr int64_t kResidualEpilogueMaxRows = 512;
// Prefill chunks from this many query rows run the tensor-core flash
// attention; shorter ones waste no rows of its kBlockM-row tiles.
constexpr int64_t kFlashMinQuery = 16;

struct KernelTarget {
  std::string arch = "sm_90a";            // PlanOptions::target (not "cpu")
  std::string activation_type = "bf16";  // the plan's
};

// Whether the CUDA backend runs a step of this kind on the host (verify's
// tree_positions, tree_mask and accept: index work over a few hundred
// nodes, whose results it stages as inputs or reads from the logits).
bool runsOnHost(StepKind kind);

// Every step's variants, in step order. Errors name the step.
Result<std::vector<std::vector<KernelVariant>>> selectKernels(const PlanEntry& entry, const KernelTarget& target);

// The argmax over the `forward` entry's logits ([rows, vocab] of
// logits_type, bf16 or f32) that greedy batches run instead of copying the
// logits back: a runtime kernel beside the plan's.
struct GreedyInstance {
  std::string kind;
  nlohmann::json params;
  std::string name;
};
GreedyInstance greedyInstance(int64_t vocab, std::string_view logits_type);

// The ggml blocks a gemm's weight runs as on the GPU: its own q4_0, q4_1,
// q8_0, q4_k, q5_k or q6_k, or for kiln's int8 and int4 (separate scales) the q8_0 and q4_0
// blocks the weight store quantizes them into; nullopt for every other
// weight. The selection and the runtime's weight forms both ask here.
std::optional<std::string> gemmBlockType(const GemmParams& gemm);

// Whether a gemm's weight is 2:4 sparse: sp24, int8sp24 or int4sp24.
bool sparse24Weight(const GemmParams& gemm);

// The kept values' type sparse24_gemv reads for a sparse gemm: bf16 for
// sp24 (the runtime converts the f32 values at load), the q8_0 / q4_0
// blocks of int8sp24 / int4sp24 with their scales folded in.
std::string sparse24ValuesType(const GemmParams& gemm);

// Why `target`'s sparse gemms run as dense ones (their weight expanded at
// load): an f32 plan, or an architecture without sparse tensor cores;
// empty when the sparse kernels run them.
std::string sparse24RunsDense(const KernelTarget& target);

// Whether an embedding table of `table_type` is expanded to bf16 at load
// for the GPU's embedding kernel, which has no K-quant decoding: a gather
// reads a few rows a step, so the cost is the table's memory, not time.
bool embeddingTableExpands(std::string_view table_type);

// The columns one scale covers in the GPU tiles of a block-quantized gemm's
// weight when larger than its blocks': kiln's int4 groups and int8 rows
// that gemm_quant takes (a multiple of 64 dividing k); 0 for the blocks'
// own (32, 16 for q6_k). The instance params and the runtime's packing
// both ask here.
int64_t gemmTileGroup(const GemmParams& gemm);

// "sm_90a" -> 90, "sm_120" -> 120; 0 for anything else.
int archVersion(std::string_view arch);

// Whether `arch` ("sm_90", "sm_80", ...) runs the wgmma kernels: Hopper,
// 9.0, whose instances are then all compiled for the arch-specific sm_90a.
bool warpgroupMmaTarget(std::string_view arch);

// Whether `arch` has sm_90's bulk copies and their barriers: 9.0 and later.
bool bulkCopyTarget(std::string_view arch);

// Names above 160 characters keep their first 96 and gain a hash of the
// whole: kernel symbols may be long, the JIT cache's file names may not.
std::string boundedInstanceName(const std::string& name);

}  // namespace kiln::cuda_codegen
