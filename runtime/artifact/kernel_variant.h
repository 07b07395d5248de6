// The kernel variants the compiler chose for a step (xfmr-select-kernels,
// codegen/cuda/kernel_selection.h): which kernel runs the step, or which
// neighbour does its work, for batches whose row count lies in a range.
// The CUDA backend dispatches only among these; kiln-kernels lists them.
//
// A step lists its variants in order of preference. Variants that share a
// role are alternatives: a variant may need optimizations a user can switch
// off for an A/B measurement (KernelFeature, kiln bench's --no-* flags), and
// the backend takes, per role, the first variant whose needs are all on
// (chooseVariants). The last alternative of a role needs nothing.
//
// In the manifest (docs/design/artifact.md):
//   "variants": [{"role": "single_row", "rows": [1, 1], "needs": ["stream_gemv"],
//                 "kind": "gemm", "params": {...}, "instance": "gemm_..."}, ...]
// rows is [min, max], max -1 for no bound. For attention the rows are the
// batch's longest query. kind, params and instance are there exactly when
// the role runs a kernel of its own.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/artifact/step_params.h"
#include "runtime/support/error.h"

namespace kiln {

enum class VariantRole {
  kStep,             // the step's own kernel
  kSkinny,           // gemm: the skinny GEMM (gemv.cuh) for decode-sized batches
  kSingleRow,        // gemm: its instance for one row
  kFused,            // gemm: skinny, with the step after it done in its epilogue
  kFusedSingleRow,   // ... and that variant's instance for one row
  kFusedPrefill,     // gemm: gemm_swiglu, SwiGLU in its epilogue, for large batches
  kCublasLt,         // gemm: cuBLASLt (no kernel of kiln's)
  kCublasLtResidual, // gemm: cuBLASLt adding the residual of the norm after it (its sum)
  kDequantize,       // gemm: its block-quantized weight expanded to bf16 for cuBLASLt
  kNormOfSum,        // residual_rms_norm: only normalizes the sum the gemm before it wrote
  kFoldedIntoNext,   // residual_rms_norm: done by the gemm after it (its single-row instance)
  kAbsorbed,         // silu_mul, rope_kv_append: done by the fused gemm before it
  kAbsorbedPrefill,  // silu_mul: done by the gemm_swiglu before it
  kDecode,           // paged_attention: split-KV decode
  kCombine,          // paged_attention: merges the decode kernel's splits; moe_ffn: sums each token's experts
  kPrefill,          // paged_attention: tensor-core flash attention
  kMoeDown,          // moe_ffn: the experts' down projections (its step kernel does gate/up)
  kMoeGroupedGateUp, // moe_ffn: gate/up as grouped tensor-core GEMMs, for batches with several slots an expert
  kMoeGroupedDown,   // moe_ffn: ... and down (the combine stays)
  kSparseGemv,       // gemm of a 2:4 sparse weight: sparse24_gemv for decode-sized batches
  kSparseGemm,       // ... and the sparse tensor-core GEMM (mma.sp, sparse wgmma) above them
};

const char* variantRoleName(VariantRole role);
std::optional<VariantRole> parseVariantRole(std::string_view name);
// Whether the role runs a kernel instance of its own (else it is a library
// call or another step's work).
bool roleHasKernel(VariantRole role);

// The optimizations a variant may need, each one CudaTuning switch.
enum class KernelFeature { kStreamGemv, kFoldNorms, kResidualEpilogue, kFusedSwiGlu, kFlashAttention };

const char* kernelFeatureName(KernelFeature feature);
std::optional<KernelFeature> parseKernelFeature(std::string_view name);

struct RowRange {
  static constexpr int64_t kUnbounded = -1;
  int64_t min = 1;
  int64_t max = kUnbounded;
  bool contains(int64_t rows) const { return rows >= min && (max == kUnbounded || rows <= max); }
};

struct KernelVariant {
  VariantRole role = VariantRole::kStep;
  RowRange rows;
  std::vector<KernelFeature> needs;
  // The kernel instance (roleHasKernel): its template, params and symbol.
  std::string kind;
  nlohmann::json params;
  std::string instance;
  // The step's results live apart from the arena when this variant is
  // chosen: the planner put them over rows the fused kernel still reads.
  bool own_storage = false;
};

nlohmann::json toJson(const KernelVariant& variant);
// One variant of a `kind` step at JSON path `path`; checks the role is one
// that kind takes, the range, the needs, and the kernel fields.
Result<KernelVariant> variantFromJson(const nlohmann::json& v, StepKind kind, const std::string& path);

// Which features a backend has switched on.
struct KernelFeatures {
  bool stream_gemv = true, fold_norms = true, residual_epilogue = true, fused_swiglu = true, flash_attention = true;
  bool on(KernelFeature f) const;
};

// Per role, the first variant whose needs are all on, in the step's order.
std::vector<const KernelVariant*> chooseVariants(const std::vector<KernelVariant>& variants,
                                                 const KernelFeatures& features);

}  // namespace kiln
