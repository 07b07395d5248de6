#include "codegen/cuda/kernel_selection.h"

#include <fmt/format.h>

#include "codegen/cuda/activation_types.h"
#include "codegen/cuda/instance_source.h"
#include "codegen/kernels/moe_grouped_mma.cuh"  // moe_mma::min_rows (host-visible part)
#include "runtime/artifact/step_params_json.h"

namespace kiln::cuda_codegen {

std::string boundedInstanceName(const std::string& name) {
  if (name.size() <= 160) return name;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return fmt::format("{}_{:016x}", name.substr(0, 96), h);
}

bool warpgroupMmaTarget(std::string_view arch) { return arch == "sm_90" || arch == "sm_90a"; }

int archVersion(std::string_view arch) {
  if (arch.substr(0, 3) != "sm_") return 0;
  int version = 0;
  for (char c : arch.substr(3)) {
    if (c < '0' || c > '9') break;
    version = version * 10 + (c - '0');
  }
  return version;
}

bool bulkCopyTarget(std::string_view arch) { return archVersion(arch) >= 90; }

std::optional<std::string> gemmBlockType(const GemmParams& gemm) {
  const std::string& type = gemm.weight_type;
  if (gemm.scales) {
    if (type == "int8") return "q8_0";
    if (type == "int4") return "q4_0";
    return std::nullopt;
  }
  if (type == "q4_0" || type == "q4_1" || type == "q8_0" || type == "q4_k" || type == "q5_k" || type == "q6_k")
    return type;
  return std::nullopt;
}

bool sparse24Weight(const GemmParams& gemm) {
  return gemm.weight_type == "sp24" || gemm.weight_type == "int8sp24" || gemm.weight_type == "int4sp24";
}

std::string sparse24ValuesType(const GemmParams& gemm) {
  if (gemm.weight_type == "int8sp24") return "q8_0";
  if (gemm.weight_type == "int4sp24") return "q4_0";
  return "bf16";
}

std::string sparse24RunsDense(const KernelTarget& target) {
  if (target.activation_type != "bf16")
    return fmt::format("{} activations (the sparse kernels read bf16)", target.activation_type);
  if (archVersion(target.arch) < 80) return fmt::format("{} has no sparse tensor cores (sm_80 and later)", target.arch);
  return "";
}

bool embeddingTableExpands(std::string_view table_type) {
  return table_type == "q4_k" || table_type == "q5_k" || table_type == "q6_k";
}

int64_t gemmTileGroup(const GemmParams& gemm) {
  if (!gemm.scales || gemm.group <= 0 || gemm.group % 64 != 0 || gemm.k % gemm.group != 0) return 0;
  return gemm.group;
}

GreedyInstance greedyInstance(int64_t vocab, std::string_view logits_type) {
  const nlohmann::json params{{"vocab", vocab}, {"logits_type", std::string(logits_type)}};
  return {"argmax", params, boundedInstanceName(instanceName("argmax", params))};
}

bool runsOnHost(StepKind kind) {
  return kind == StepKind::kTreePositions || kind == StepKind::kTreeMask || kind == StepKind::kAccept;
}

namespace {

using F = KernelFeature;
using R = VariantRole;
constexpr RowRange kAnyRows{1, RowRange::kUnbounded};
constexpr RowRange kSkinnyRows{2, kSkinnyMaxRows};
constexpr RowRange kOneRow{1, 1};
constexpr RowRange kCublasRows{kSkinnyMaxRows + 1, RowRange::kUnbounded};

// One step's list, built in order of preference.
class VariantList {
 public:
  void kernel(R role, RowRange rows, std::vector<F> needs, std::string_view kind, nlohmann::json params,
              std::string name = "") {
    KernelVariant v{role, rows, std::move(needs), std::string(kind), std::move(params), ""};
    v.instance = boundedInstanceName(name.empty() ? instanceName(kind, v.params) : name);
    list_.push_back(std::move(v));
  }
  // Work done elsewhere: a library call or a neighbouring kernel.
  void elsewhere(R role, RowRange rows, std::vector<F> needs = {}, bool own_storage = false) {
    list_.push_back({role, rows, std::move(needs), "", nullptr, "", own_storage});
  }
  // The last variant's step results live apart from the arena.
  void ownStorage() { list_.back().own_storage = true; }
  std::vector<KernelVariant> take() { return std::move(list_); }

 private:
  std::vector<KernelVariant> list_;
};

// attention_combine's params: the partials' heads and head_dim, and the
// output's type where the step names one.
nlohmann::json combineParams(const PagedAttentionParams& attention, std::string_view activation_type) {
  nlohmann::json combine{{"heads", attention.attn.heads}, {"head_dim", attention.attn.head_dim}};
  if (!attention.out_type.empty()) combine["out_type"] = attention.out_type;
  return withActivationTypes("attention_combine", std::move(combine), activation_type);
}

// A mixture-of-experts step's instances: moe_router as it is (its router
// GEMM inside, so only the fused form has one); moe_ffn as three kernels
// (moe.cuh): gate/up, down and the combine. Their weights are uploaded in
// the plan's activation type (bound_step.cc's stepWeightForm), so that is
// the instances' weight_type. bf16 plans on sm_80 and later add the grouped
// tensor-core gate/up and down (moe_grouped_mma.cuh) for batches that give
// an expert moe_mma::kMinAverage slots or more on average, where their
// template takes the shape.
std::vector<KernelVariant> moeVariants(const PlanStep& step, std::string_view activation_type,
                                       const KernelTarget& target) {
  VariantList out;
  nlohmann::json params = toJson(step.params);
  if (const auto* router = std::get_if<MoeRouterParams>(&step.params); router && router->hidden == 0) return {};
  params["weight_type"] = std::string(activation_type);
  auto typed = [&](std::string_view kind) { return withActivationTypes(kind, params, activation_type); };
  if (step.kind == StepKind::kMoeRouter) {
    out.kernel(R::kStep, kAnyRows, {}, "moe_router", typed("moe_router"));
    return out.take();
  }
  out.kernel(R::kStep, kAnyRows, {}, "moe_gate_up", typed("moe_gate_up"));
  out.kernel(R::kMoeDown, kAnyRows, {}, "moe_down", typed("moe_down"));
  out.kernel(R::kCombine, kAnyRows, {}, "moe_combine", typed("moe_combine"));
  if (activation_type != "bf16" || archVersion(target.arch) < 80 ||
      !instanceSource("moe_gate_up_mma", params, "probe").ok())
    return out.take();
  const MoeFfnParams& moe = std::get<MoeFfnParams>(step.params);
  const RowRange grouped{kernels::moe_mma::min_rows(int(moe.experts), int(moe.top_k)), RowRange::kUnbounded};
  out.kernel(R::kMoeGroupedGateUp, grouped, {}, "moe_gate_up_mma", params);
  out.kernel(R::kMoeGroupedDown, grouped, {}, "moe_down_mma", params);
  return out.take();
}

// An f32 plan's step: its instance with its activation types named
// (activation_types.h), under a name of its own. Its GEMMs run on cuBLASLt
// in f32 (the skinny kernels are bf16's); attention takes the CUDA-core
// kernel and its split mode with the combine (decode_attention and the
// tensor-core prefill read bf16 queries).
std::vector<KernelVariant> f32Variants(const PlanStep& step) {
  VariantList out;
  const std::string_view kind = stepKindName(step.kind);
  if (step.kind == StepKind::kSplit || runsOnHost(step.kind)) return {};
  if (step.kind == StepKind::kMoeRouter || step.kind == StepKind::kMoeFfn) return moeVariants(step, "f32", KernelTarget{});
  if (step.kind == StepKind::kGemm) {
    // Weights with separate scales have no CUDA GEMM; blocks and 2:4
    // sparse weights are expanded to f32 at load.
    const GemmParams& gemm = std::get<GemmParams>(step.params);
    if (!gemm.scales || sparse24Weight(gemm)) out.elsewhere(R::kCublasLt, kAnyRows);
    return out.take();
  }
  const nlohmann::json params = toJson(step.params);
  out.kernel(R::kStep, kAnyRows, {}, kind, withActivationTypes(kind, params, "f32"));
  const auto* attention = std::get_if<PagedAttentionParams>(&step.params);
  if (!attention || attention->tree_mask) return out.take();
  out.kernel(R::kDecode, kAnyRows, {}, "paged_attention_split", withActivationTypes("paged_attention_split", params, "f32"));
  out.kernel(R::kCombine, kAnyRows, {}, "attention_combine", combineParams(*attention, "f32"));
  return out.take();
}

// A bf16 gemm's instances for one row, best first: streamed with the norm
// before it folded in, streamed, plain.
void addSingleRow(VariantList& out, R role, const nlohmann::json& params, const GemmParams& gemm,
                  const SkinnyFusion& fusion, const KernelTarget& target) {
  nlohmann::json plain = params;
  plain["gemv_max_rows"] = 1;
  const bool streams = bulkCopyTarget(target.arch) && streamsSingleRowGemm(gemm.n, gemm.k);
  if (streams) {
    nlohmann::json streamed = plain;
    streamed["gemv_stream"] = true;
    if (fusion.single_row_params.is_object()) {
      nlohmann::json folded = streamed;
      folded.update(fusion.single_row_params);
      out.kernel(role, kOneRow, {F::kStreamGemv, F::kFoldNorms}, "gemm", std::move(folded));
    }
    out.kernel(role, kOneRow, {F::kStreamGemv}, "gemm", std::move(streamed));
  }
  out.kernel(role, kOneRow, {}, "gemm", std::move(plain));
}

// A gemm of ggml blocks (`blocks`: q4_0, q4_1, q8_0), repacked at load
// into tensor-core tiles (quant_blocks.cuh): gemm_quant.cuh reads them up
// to kQuantGemmMaxRows rows of x, one 8-row x tile a block for up to 8 rows
// (the single-row role's range), two from there on (grid.z walks further
// groups of 16); larger batches expand the weight to bf16 for cuBLASLt.
// kiln's int8 and int4 weights are such blocks once the weight store has
// quantized them (q8_0 per channel, q4_0 per group, scales folded in).
std::vector<KernelVariant> blockGemmVariants(const PlanStep& step, const std::string& blocks) {
  VariantList out;
  const GemmParams& gemm = std::get<GemmParams>(step.params);
  const bool plan_blocks = blocks == gemm.weight_type;  // else the params differ from the plan's
  nlohmann::json params = toJson(step.params);
  if (gemm.scales) params.erase("scales");  // folded into the blocks
  params["weight_type"] = blocks;
  // The tiles keep one scale a group where kiln's scheme shares it over more
  // than a block (int4 groups of 64 or more, int8 per row).
  params.erase("group");
  nlohmann::json dequantize{{"n", gemm.n}, {"k", gemm.k}, {"weight_type", blocks}};
  if (const int64_t group = gemmTileGroup(gemm)) params["group"] = dequantize["group"] = group;
  // One x tile is the instance's default: the plan's own name fits it.
  out.kernel(R::kSingleRow, {1, kSkinnyMaxRows}, {}, "gemm", params, plan_blocks ? step.instance : "");
  nlohmann::json two_tiles = params;
  two_tiles["gemv_max_rows"] = 2 * kSkinnyMaxRows;
  out.kernel(R::kSkinny, {kSkinnyMaxRows + 1, kQuantGemmMaxRows}, {}, "gemm", std::move(two_tiles));
  const RowRange expanded{kQuantGemmMaxRows + 1, RowRange::kUnbounded};
  out.kernel(R::kDequantize, expanded, {}, "dequantize", std::move(dequantize));
  out.elsewhere(R::kCublasLt, expanded);
  return out.take();
}

// A gemm of a 2:4 sparse weight: sparse24_gemv for decode-sized batches
// (its own tiling for the shape), then the sparse tensor-core GEMM, which
// reads bf16 kept values (the runtime expands q8_0 / q4_0 ones to bf16 for
// it). On a target without sparse tensor cores, cuBLASLt on the weight
// expanded to a dense matrix at load.
std::vector<KernelVariant> sparse24Variants(const GemmParams& gemm, const KernelTarget& target) {
  VariantList out;
  if (!sparse24RunsDense(target).empty()) {
    out.elsewhere(R::kCublasLt, kAnyRows);
    return out.take();
  }
  const nlohmann::json gemv{{"n", gemm.n}, {"k", gemm.k}, {"values_type", sparse24ValuesType(gemm)},
                            {"bias", gemm.bias}, {"out_type", target.activation_type}};
  out.kernel(R::kSparseGemv, {1, kSkinnyMaxRows}, {}, "sparse24_gemv", gemv);
  nlohmann::json tiles = gemv;
  tiles["values_type"] = "bf16";
  const bool wgmma = warpgroupMmaTarget(target.arch) && gemm.k % 128 == 0;
  out.kernel(R::kSparseGemm, kCublasRows, {}, wgmma ? "sparse24_gemm_wgmma" : "sparse24_gemm", std::move(tiles));
  return out.take();
}

std::vector<KernelVariant> gemmVariants(const PlanStep& step, const SkinnyFusion& fusion, const KernelTarget& target) {
  VariantList out;
  const GemmParams& gemm = std::get<GemmParams>(step.params);
  if (sparse24Weight(gemm)) return sparse24Variants(gemm, target);
  if (std::optional<std::string> blocks = gemmBlockType(gemm)) return blockGemmVariants(step, *blocks);
  // fp8 weights and block types without a CUDA kernel get none: the CUDA
  // backend refuses the plan and names the step.
  if (gemm.scales || (gemm.weight_type != "f32" && gemm.weight_type != "bf16" && gemm.weight_type != "f16"))
    return {};
  // The skinny kernels read bf16 weights: the runtime converts float ones at load.
  nlohmann::json params = toJson(step.params);
  const bool bf16_weights = gemm.weight_type == "bf16";
  params["weight_type"] = "bf16";
  const bool fused = fusion.gemm_params.is_object() && !fusion.gemm_params.empty();
  // Shapes the skinny kernels do not tile (k not a multiple of 8: Mamba's
  // dt_proj at a small time_step_rank) run on cuBLASLt at every row count.
  if (!fused && !instanceSource("gemm", params, "probe").ok()) {
    out.elsewhere(R::kCublasLt, kAnyRows);
    return out.take();
  }
  if (!fused) {
    addSingleRow(out, R::kSingleRow, params, gemm, fusion, target);
    out.kernel(R::kSkinny, kSkinnyRows, {}, "gemm", params, bf16_weights ? step.instance : "");
  } else {
    nlohmann::json variant = params;
    variant.update(fusion.gemm_params);
    addSingleRow(out, R::kFusedSingleRow, variant, gemm, fusion, target);
    out.kernel(R::kFused, kSkinnyRows, {}, "gemm", variant);
    // Larger batches: the gate/up projection with SwiGLU on the warpgroup
    // tensor cores, where its tiles divide the shape (its template says).
    const nlohmann::json swiglu{{"hidden", gemm.k}, {"ffn", gemm.n / 2}};
    if (warpgroupMmaTarget(target.arch) && fusion.gemm_params.value("silu_mul", false) && !gemm.bias &&
        gemm.n % 2 == 0 && instanceSource("gemm_swiglu", swiglu, "probe").ok())
      out.kernel(R::kFusedPrefill, {kFusedSwiGluMinRows, RowRange::kUnbounded}, {F::kFusedSwiGlu}, "gemm_swiglu",
                 swiglu);
  }
  if (fusion.writes_norm_sum)
    out.elsewhere(R::kCublasLtResidual, {kSkinnyMaxRows + 1, kResidualEpilogueMaxRows}, {F::kResidualEpilogue});
  out.elsewhere(R::kCublasLt, kCublasRows);
  return out.take();
}

std::vector<KernelVariant> attentionVariants(const PlanStep& step, const KernelTarget& target) {
  VariantList out;
  const PagedAttentionParams& attention = std::get<PagedAttentionParams>(step.params);
  const nlohmann::json params = toJson(step.params);
  out.kernel(R::kStep, kAnyRows, {}, "paged_attention", params, step.instance);
  if (attention.tree_mask) return out.take();
  // Decode: the bandwidth-bound split-KV kernel where its template serves
  // the pool, else the CUDA-core kernel's split mode.
  const char* decode = instanceSource("decode_attention", params, "probe").ok() ? "decode_attention"
                                                                               : "paged_attention_split";
  out.kernel(R::kDecode, kAnyRows, {}, decode, params);
  out.kernel(R::kCombine, kAnyRows, {}, "attention_combine", combineParams(attention, "bf16"));
  const int64_t head_dim = attention.attn.head_dim;
  if (attention.attn.kv_type == "bf16" && (head_dim == 64 || head_dim == 128)) {
    const char* prefill = warpgroupMmaTarget(target.arch) ? "flash_attention_wgmma" : "flash_attention";
    out.kernel(R::kPrefill, {kFlashMinQuery, RowRange::kUnbounded}, {F::kFlashAttention}, prefill, params);
  }
  return out.take();
}

}  // namespace

Result<std::vector<std::vector<KernelVariant>>> selectKernels(const PlanEntry& entry, const KernelTarget& target) {
  std::vector<std::vector<KernelVariant>> out;
  if (target.activation_type == "f32") {
    for (const PlanStep& step : entry.steps) out.push_back(f32Variants(step));
    return out;
  }
  if (target.activation_type != "bf16")
    return makeError("activation type '{}' has no CUDA kernels (bf16 or f32); compile for target cpu to run it on "
                     "the CPU backend",
                     target.activation_type);
  PlanEntry bf16 = entry;
  bf16.activation_type = "bf16";
  const std::vector<SkinnyFusion> fusions = skinnyFusions(bf16);
  const bool streams = bulkCopyTarget(target.arch);
  for (size_t i = 0; i < entry.steps.size(); ++i) {
    const PlanStep& step = entry.steps[i];
    const SkinnyFusion& fusion = fusions[i];
    const std::string_view kind = stepKindName(step.kind);
    if (step.kind == StepKind::kSplit || runsOnHost(step.kind)) {
      out.emplace_back();
      continue;
    }
    if (step.kind == StepKind::kGemm) {
      out.push_back(gemmVariants(step, fusion, target));
      continue;
    }
    if (step.kind == StepKind::kPagedAttention) {
      out.push_back(attentionVariants(step, target));
      continue;
    }
    if (step.kind == StepKind::kMoeRouter || step.kind == StepKind::kMoeFfn) {
      out.push_back(moeVariants(step, "bf16", target));
      continue;
    }
    VariantList list;
    if (const auto* embedding = std::get_if<EmbeddingParams>(&step.params);
        embedding && embeddingTableExpands(embedding->table_type)) {
      nlohmann::json params = toJson(step.params);
      params["table_type"] = "bf16";  // the runtime expands the table at load
      list.kernel(R::kStep, kAnyRows, {}, kind, std::move(params));
      out.push_back(list.take());
      continue;
    }
    list.kernel(R::kStep, kAnyRows, {}, kind, toJson(step.params), step.instance);
    if (fusion.absorbed_single_row && streams)
      list.elsewhere(R::kFoldedIntoNext, kOneRow, {F::kStreamGemv, F::kFoldNorms});
    if (fusion.sum_from_gemm) {
      list.kernel(R::kNormOfSum, {kSkinnyMaxRows + 1, kResidualEpilogueMaxRows}, {F::kResidualEpilogue}, "rms_norm",
                  fusion.norm_of_sum_params);
      if (fusion.sum_own_storage) list.ownStorage();
    }
    if (fusion.absorbed) {
      list.elsewhere(R::kAbsorbed, {1, kSkinnyMaxRows}, {}, fusion.own_storage);
      const bool by_swiglu = i > 0 && [&] {
        for (const KernelVariant& v : out[i - 1])
          if (v.role == R::kFusedPrefill) return true;
        return false;
      }();
      if (by_swiglu) list.elsewhere(R::kAbsorbedPrefill, {kFusedSwiGluMinRows, RowRange::kUnbounded}, {F::kFusedSwiGlu});
    }
    out.push_back(list.take());
  }
  return out;
}

}  // namespace kiln::cuda_codegen
