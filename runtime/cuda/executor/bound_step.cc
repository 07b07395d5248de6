#include "runtime/cuda/executor/bound_step.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

#include "codegen/cuda/activation_types.h"
#include "codegen/cuda/kernel_selection.h"
#include "runtime/artifact/step_params_json.h"
#include "runtime/cuda/executor/gemm_dispatch.h"
#include "runtime/cuda/executor/kiln_assign.h"
#include "runtime/cuda/executor/sparse24_image.h"
#include "runtime/cuda/executor/sparse24_layout.h"
#include "runtime/cuda/tensor_map.h"

namespace kiln::cuda {

namespace {

using Role = VariantRole;

const char* elemName(int elem) { return elem == 4 ? "f32" : "bf16"; }

// The instance's element type for each value operand and result, against
// the manifest's value types. `typed` are the step's params with the plan's
// activation types named (activation_types.h): a `*_type` param types its
// operand, an absent one is bf16 (the templates' default). A gemm's x and y
// are the plan's activation type (`gemm_elem`), in which cuBLASLt runs it.
Status checkValueTypes(const Step& step, const nlohmann::json& typed, int gemm_elem,
                       const std::vector<DeviceValue>& args, const std::vector<DeviceValue>& results) {
  if (step.kind == StepKind::kSplit) return {};  // a copy: results take x's type
  auto named = [&](const char* param) -> Result<int> {
    if (!param || !typed.contains(param)) return 2;
    const nlohmann::json& type = typed[param];
    if (type != "bf16" && type != "f32")
      return makeError("{}: param '{}' is {}, expected bf16 or f32", step.path, param, type.dump());
    return type == "f32" ? 4 : 2;
  };
  const bool gemm = step.kind == StepKind::kGemm;
  const cuda_codegen::ActivationTypeParams& params = cuda_codegen::activationTypeParams(stepKindName(step.kind));
  for (size_t a = 0; a < args.size(); ++a) {
    if (!args[a].valid || args[a].integer) continue;
    const char* param = a < params.args.size() ? params.args[a] : nullptr;
    KILN_ASSIGN(elem, named(param));
    if (gemm) elem = gemm_elem;
    if (args[a].elem != elem)
      return makeError("{}: args[{}] is {} but the {} reads {}{}", step.path, a, elemName(args[a].elem),
                       gemm ? "GEMM" : "instance", elemName(elem), param ? fmt::format(" ({})", param) : "");
  }
  for (size_t r = 0; r < results.size(); ++r) {
    if (results[r].integer) continue;
    const size_t from_last = results.size() - 1 - r;
    const char* param = from_last < params.results_from_last.size() ? params.results_from_last[from_last] : nullptr;
    KILN_ASSIGN(elem, named(param));
    if (gemm) elem = gemm_elem;
    if (results[r].elem != elem)
      return makeError("{}: results[{}] is {} but the {} writes {}{}", step.path, r, elemName(results[r].elem),
                       gemm ? "GEMM" : "instance", elemName(elem), param ? fmt::format(" ({})", param) : "");
  }
  return {};
}

// Step i's chosen variants bound: by role, its own kernel, the skinny gemm
// variants and gemm_swiglu, the norm over a gemm's sum, the attention
// kernels for decode and prefill, and the rows of the work a neighbour does.
Status bindKernels(const KernelSet& kernels, size_t i, BoundStep& s) {
  // The kernels with dynamic shared memory above the 48 KiB default must
  // say so before their first launch.
  auto bind = [&](const std::string& name, CUfunction& fn, unsigned& block, unsigned& smem) -> Status {
    const Kernel& k = kernels.kernel(name);
    fn = k.fn;
    block = k.block;
    smem = k.smem;
    return kernels.optInSharedMemory(k);
  };
  auto gemv = [&](const ChosenVariant& v, GemvKernel& g) -> Status {
    const Kernel& k = kernels.kernel(v.instance);
    g = GemvKernel{k.fn, v.instance, v.rows, k.block, k.rows_per_block, k.max_rows};
    g.tiles = k.tiles;
    unsigned block = 0;
    return g.tiles == 0 && k.smem == 0 ? Status{} : bind(v.instance, g.fn, block, g.smem);
  };
  unsigned smem = 0;
  for (const ChosenVariant& v : kernels.chosen(i)) {
    switch (v.role) {
      case Role::kStep:
        s.instance = v.instance;
        KILN_RETURN_IF_ERROR(bind(v.instance, s.fn, s.block, smem));
        break;
      case Role::kSkinny: KILN_RETURN_IF_ERROR(gemv(v, s.skinny)); break;
      case Role::kSingleRow: KILN_RETURN_IF_ERROR(gemv(v, s.single)); break;
      case Role::kFused:
        s.fused = true;
        KILN_RETURN_IF_ERROR(gemv(v, s.skinny));
        break;
      case Role::kFusedSingleRow:
        s.fused = true;
        KILN_RETURN_IF_ERROR(gemv(v, s.single));
        break;
      case Role::kFusedPrefill:
        s.swiglu_rows = v.rows;
        KILN_RETURN_IF_ERROR(bind(v.instance, s.swiglu_fn, smem, s.swiglu_smem));
        break;
      case Role::kCublasLt: break;  // what no other variant covers
      case Role::kCublasLtResidual: s.residual_rows = v.rows; break;
      case Role::kDequantize:
        s.dequantize_rows = v.rows;
        KILN_RETURN_IF_ERROR(bind(v.instance, s.dequantize_fn, s.dequantize_block, smem));
        break;
      case Role::kNormOfSum:
        s.norm_of_sum_rows = v.rows;
        KILN_RETURN_IF_ERROR(bind(v.instance, s.norm_of_sum_fn, s.norm_of_sum_block, smem));
        break;
      case Role::kFoldedIntoNext: s.folded_rows = v.rows; break;
      case Role::kAbsorbed: s.absorbed_rows = v.rows; break;
      case Role::kAbsorbedPrefill: s.absorbed_prefill_rows = v.rows; break;
      case Role::kDecode:
        KILN_RETURN_IF_ERROR(bind(v.instance, s.split_fn, s.split_block, s.split_smem));
        s.split_merges_itself = kernels.kernel(v.instance).kind == "decode_attention";
        break;
      case Role::kCombine: KILN_RETURN_IF_ERROR(bind(v.instance, s.combine_fn, s.combine_block, smem)); break;
      case Role::kMoeDown: KILN_RETURN_IF_ERROR(bind(v.instance, s.moe_down_fn, s.moe_down_block, smem)); break;
      case Role::kMoeGroupedGateUp:
        s.moe_grouped_rows = v.rows;
        KILN_RETURN_IF_ERROR(bind(v.instance, s.moe_grouped_gate_up_fn, s.moe_grouped_block, s.moe_grouped_smem));
        break;
      case Role::kMoeGroupedDown:
        KILN_RETURN_IF_ERROR(bind(v.instance, s.moe_grouped_down_fn, s.moe_grouped_block, s.moe_grouped_smem));
        break;
      case Role::kSparseGemv: KILN_RETURN_IF_ERROR(gemv(v, s.sparse_gemv)); break;
      case Role::kSparseGemm: {
        // Its tile in the gemv's terms: weight rows and rows of x a block.
        KILN_RETURN_IF_ERROR(gemv(v, s.sparse_gemm));
        const Kernel& k = kernels.kernel(v.instance);
        if (k.block_n <= 0 || k.block_m <= 0)
          return makeError("instance {}: no kBlockN and kBlockM in its Config", k.name);
        s.sparse_gemm.rows_per_block = k.block_n;
        s.sparse_gemm.max_rows = k.block_m;
        break;
      }
      case Role::kPrefill: {
        const Kernel& flash = kernels.kernel(v.instance);
        KILN_RETURN_IF_ERROR(bind(v.instance, s.flash_fn, s.flash_block, s.flash_smem));
        s.flash_block_m = unsigned(flash.block_m);
        s.flash_kind = flash.kind;
        s.flash_rows = v.rows;
        if (s.flash_block_m == 0) return makeError("instance {}: no kBlockM in its Config", flash.name);
        break;
      }
    }
  }
  if (s.kind == StepKind::kPagedAttention && (!s.fn || (s.split_fn && !s.combine_fn)))
    return makeError("{}: paged_attention's variants need its own kernel, and a combine beside a decode kernel",
                     s.path);
  if (s.kind != StepKind::kGemm && s.kind != StepKind::kSplit && !s.fn)
    return makeError("{} ({}): no 'step' variant: nothing runs it", s.path, stepKindName(s.kind));
  if (s.kind == StepKind::kMoeFfn && (!s.moe_down_fn || !s.combine_fn))
    return makeError("{}: moe_ffn's variants need its gate/up kernel, a moe_down and a combine", s.path);
  if (s.kind == StepKind::kMoeFfn && (!s.moe_grouped_gate_up_fn != !s.moe_grouped_down_fn))
    return makeError("{}: moe_ffn's grouped variants come in pairs (moe_grouped_gate_up and moe_grouped_down)",
                     s.path);
  return {};
}

// Each kind's operands: the params the forward reads (widths, heads), and
// their checks against the values, weights and pools.
Status bindParams(const Step& step, const WeightStore& weights,
                  BoundStep& s) {
  const size_t na = step.args.size();
  auto needValue = [&](size_t a) -> Status {
    if (a >= na || !s.args[a].valid)
      return makeError("{} ({}): args[{}] must be a value", step.path, stepKindName(step.kind), a);
    return {};
  };
  // The state-space and hybrid steps' operands: a value of rows of `width`,
  // a weight of `shape`, the query_start and state_slots inputs, the result.
  auto needWidth = [&](size_t a, int64_t width, const char* what) -> Status {
    KILN_RETURN_IF_ERROR(needValue(a));
    if (s.args[a].width != width)
      return makeError("{}: args[{}] ({}) has rows of {}, expected {}", step.path, a, what, s.args[a].width, width);
    return {};
  };
  auto needShape = [&](size_t a, std::vector<int64_t> shape, const char* what) -> Status {
    const BoundWeight* w = a < na && step.args[a].kind == StepArg::Kind::kWeight ? weights.find(step.args[a].id)
                                                                                 : nullptr;
    if (!w) return makeError("{}: args[{}] ({}) must be a weight", step.path, a, what);
    if (w->shape != shape)
      return makeError("{}: {} {} '{}' has shape {}, expected {}", step.path, what, w->id, w->name,
                       formats::shapeToString(w->shape), formats::shapeToString(shape));
    return {};
  };
  auto needSlots = [&](size_t query_start, size_t slots) -> Status {
    if (slots >= na || s.inputs[query_start] != kQueryStart || s.inputs[slots] != kStateSlots)
      return makeError("{}: args[{}] and [{}] must be the query_start and state_slots inputs", step.path,
                       query_start, slots);
    return {};
  };
  auto needResult = [&](int64_t width) -> Status {
    if (s.results.empty() || s.results[0].width != width)
      return makeError("{}: results[0] has rows of {}, expected {}", step.path,
                       s.results.empty() ? 0 : s.results[0].width, width);
    return {};
  };
  switch (step.kind) {
    case StepKind::kAllReduce:
    case StepKind::kSend:
    case StepKind::kRecv:
      return makeError("{}: {} exchanges activations between ranks; no backend runs it yet (issue #26)", step.path,
                       stepKindName(step.kind));
    case StepKind::kEmbedding: {
      const BoundWeight* table = weights.find(step.args[1].id);
      s.vocab = table->shape.empty() ? 0 : table->shape[0];
      break;
    }
    case StepKind::kRmsNorm:
    case StepKind::kResidualRmsNorm: {
      KILN_RETURN_IF_ERROR(needValue(0));
      if (step.kind == StepKind::kResidualRmsNorm) {
        KILN_RETURN_IF_ERROR(needValue(1));
        s.writes_sum = step.as<ResidualRmsNormParams>().writes_sum;  // the plan checked its results
      }
      break;
    }
    case StepKind::kGemm: {
      KILN_RETURN_IF_ERROR(needValue(0));
      const int64_t n = step.as<GemmParams>().n, k = step.as<GemmParams>().k;
      s.width = n;
      s.k = k;
      s.scales = step.as<GemmParams>().scales;
      if (s.args[0].width != k || s.results[0].width != n)
        return makeError("{}: x has rows of {}, y of {}; expected k {} and n {}", step.path, s.args[0].width,
                         s.results[0].width, k, n);
      const BoundWeight* w = weights.find(step.args[1].id);
      if (w->shape != std::vector<int64_t>{n, k})
        return makeError("{}: weight {} '{}' has shape {}, expected [{}, {}]", step.path, w->id, w->name,
                         formats::shapeToString(w->shape), n, k);
      break;
    }
    case StepKind::kRopeKvAppend: {
      const RopeKvAppendParams& q = step.as<RopeKvAppendParams>();  // heads, pools and args checked by the plan
      s.heads = int(q.attn.heads);
      s.kv_heads = int(q.attn.kv_heads);
      s.head_dim = int(q.attn.head_dim);
      s.merged = q.merged_qkv;
      s.qk_norm = q.qk_norm;
      KILN_RETURN_IF_ERROR(needValue(0));
      const size_t pos = s.merged ? 1 : 3;  // positions, then slot_mapping
      if (s.inputs.size() < pos + 2 || s.inputs[pos] < 0 || s.inputs[pos + 1] < 0)
        return makeError("{}: args[{}] and [{}] must be the positions (an input, or verify's tree_positions) and "
                         "slot_mapping",
                         step.path, pos, pos + 1);
      break;
    }
    case StepKind::kPagedAttention: {
      const PagedAttentionParams& a = step.as<PagedAttentionParams>();
      if (a.tree_mask && (s.inputs.size() < 7 || s.inputs[6] != kTreeMask))
        return makeError("{}: args[6] (tree_mask) is not the tree_mask step's result", step.path);
      s.heads = int(a.attn.heads);
      s.kv_heads = int(a.attn.kv_heads);
      s.head_dim = int(a.attn.head_dim);
      KILN_RETURN_IF_ERROR(needValue(0));
      break;
    }
    case StepKind::kSiluMul: {
      s.width = step.as<SiluMulParams>().ffn;
      s.merged = step.as<SiluMulParams>().merged_gate_up;
      KILN_RETURN_IF_ERROR(needValue(0));
      break;
    }
    case StepKind::kAdd:
    case StepKind::kMul:
    case StepKind::kSilu: {
      s.width = step.as<ElementwiseParams>().width;
      KILN_RETURN_IF_ERROR(needValue(0));
      break;
    }
    case StepKind::kSplit: {
      const std::vector<int64_t>& sizes = step.as<SplitParams>().sizes;  // one per result (the plan's check)
      KILN_RETURN_IF_ERROR(needValue(0));
      int64_t total = 0;
      for (size_t r = 0; r < sizes.size(); ++r) {
        if (s.results[r].width != sizes[r] || s.results[r].elem != s.args[0].elem)
          return makeError("{}: results[{}] has rows of {}, expected {}", step.path, r, s.results[r].width,
                           sizes[r]);
        total += sizes[r];
      }
      if (total != s.args[0].width)
        return makeError("{}: sizes add up to {}, x has rows of {} (the CUDA executor splits "
                         "the last axis only)",
                         step.path, total, s.args[0].width);
      s.sizes = sizes;
      break;
    }
    case StepKind::kGatherLastTokens: {
      s.width = step.as<GatherLastTokensParams>().hidden;
      KILN_RETURN_IF_ERROR(needValue(0));
      break;
    }
    case StepKind::kMoeRouter: {
      const MoeRouterParams& p = step.as<MoeRouterParams>();
      if (p.hidden == 0 || na != 2)
        return makeError("{}: the CUDA executor runs moe_router with its router GEMM inside (args h, Wrouter)",
                         step.path);
      KILN_RETURN_IF_ERROR(needValue(0));
      if (s.args[0].width != p.hidden || s.results.size() != 2 || !s.results[1].integer ||
          s.results[0].width != p.top_k || s.results[1].width != p.top_k)
        return makeError("{}: expected h [N, {}] -> weights [N, {}], i32 ids [N, {}]", step.path, p.hidden, p.top_k,
                         p.top_k);
      s.width = p.hidden;
      s.k = p.top_k;
      s.experts = p.experts;
      break;
    }
    case StepKind::kMoeFfn: {
      const MoeFfnParams& p = step.as<MoeFfnParams>();
      for (size_t a = 0; a < 3; ++a) KILN_RETURN_IF_ERROR(needValue(a));
      if (!s.args[2].integer || s.args[0].width != p.hidden || s.args[1].width != p.top_k ||
          s.args[2].width != p.top_k || s.results[0].width != p.hidden)
        return makeError("{}: expected x [N, {}], weights [N, {}], i32 ids [N, {}] -> [N, {}]", step.path, p.hidden,
                         p.top_k, p.top_k, p.hidden);
      s.width = p.hidden;
      s.k = p.top_k;
      s.experts = p.experts;
      s.ffn = p.ffn;
      break;
    }
    case StepKind::kTreePositions:
    case StepKind::kTreeMask: break;  // computed on the host and staged (BatchInputBuffer::stageTree)
    case StepKind::kAccept:
      if (step.as<AcceptParams>().mode != "greedy")
        return makeError("{}: accept mode {} is not run by the CUDA executor (greedy only)", step.path,
                         step.as<AcceptParams>().mode);
      break;
    case StepKind::kReluSquared: {
      s.width = step.as<ElementwiseParams>().width;
      KILN_RETURN_IF_ERROR(needWidth(0, s.width, "x"));
      KILN_RETURN_IF_ERROR(needResult(s.width));
      break;
    }
    case StepKind::kKvAppend: {
      const KvAppendParams& p = step.as<KvAppendParams>();  // pools and kv_type checked by the plan
      s.kv_heads = int(p.kv_heads);
      s.head_dim = int(p.head_dim);
      for (size_t a : {0u, 1u}) KILN_RETURN_IF_ERROR(needWidth(a, p.kv_heads * p.head_dim, a == 0 ? "k" : "v"));
      if (s.inputs.size() < 3 || s.inputs[2] != kSlotMapping || !s.pools[3] || !s.pools[4])
        return makeError("{}: expected k, v, slot_mapping, k_pool, v_pool", step.path);
      if (s.pool_scales[3] || s.pool_scales[4])
        return makeError("{}: kv_append writes bf16 or f32 pools; int8/fp8 pools are not written unrotated",
                         step.path);
      break;
    }
    case StepKind::kSsmConv1d: {
      const SsmConv1dParams& p = step.as<SsmConv1dParams>();
      s.width = p.channels;
      KILN_RETURN_IF_ERROR(needWidth(0, p.channels, "x"));
      KILN_RETURN_IF_ERROR(needShape(2, {p.channels, 1, p.width}, "conv weight"));
      if (p.bias) KILN_RETURN_IF_ERROR(needShape(5, {p.channels}, "conv bias"));
      KILN_RETURN_IF_ERROR(needSlots(3, 4));
      KILN_RETURN_IF_ERROR(needResult(p.channels));
      break;
    }
    case StepKind::kSelectiveScan: {
      const SelectiveScanParams& p = step.as<SelectiveScanParams>();
      s.width = p.channels;
      s.k = p.state;
      KILN_RETURN_IF_ERROR(needWidth(0, p.channels, "x"));
      KILN_RETURN_IF_ERROR(needWidth(1, p.channels, "dt"));
      KILN_RETURN_IF_ERROR(needWidth(3, p.state, "b"));
      KILN_RETURN_IF_ERROR(needWidth(4, p.state, "c"));
      KILN_RETURN_IF_ERROR(needShape(2, {p.channels, p.state}, "a_log"));
      KILN_RETURN_IF_ERROR(needShape(5, {p.channels}, "d"));
      KILN_RETURN_IF_ERROR(needSlots(7, 8));
      KILN_RETURN_IF_ERROR(needResult(p.channels));
      break;
    }
    case StepKind::kSsdScan: {
      const SsdScanParams& p = step.as<SsdScanParams>();
      s.heads = int(p.heads);
      s.head_dim = int(p.head_dim);
      s.k = p.state;
      s.dt_min = float(p.dt_min);
      s.dt_max = float(p.dt_max);  // infinity: no upper limit
      KILN_RETURN_IF_ERROR(needWidth(0, p.heads * p.head_dim, "x"));
      KILN_RETURN_IF_ERROR(needWidth(1, p.heads, "dt"));
      KILN_RETURN_IF_ERROR(needWidth(4, p.groups * p.state, "b"));
      KILN_RETURN_IF_ERROR(needWidth(5, p.groups * p.state, "c"));
      for (size_t a : {2u, 3u, 6u}) KILN_RETURN_IF_ERROR(needShape(a, {p.heads}, "per-head weight"));
      KILN_RETURN_IF_ERROR(needSlots(8, 9));
      KILN_RETURN_IF_ERROR(needResult(p.heads * p.head_dim));
      break;
    }
    case StepKind::kSsmGatedNorm: {
      const SsmGatedNormParams& p = step.as<SsmGatedNormParams>();
      s.width = p.features;
      s.epsilon = float(p.epsilon);
      KILN_RETURN_IF_ERROR(needWidth(0, p.features, "x"));
      KILN_RETURN_IF_ERROR(needWidth(1, p.features, "gate"));
      KILN_RETURN_IF_ERROR(needShape(2, {p.features}, "norm weight"));
      KILN_RETURN_IF_ERROR(needResult(p.features));
      break;
    }
  }
  return {};
}

// Whether every row count in `inner` lies in `outer`.
bool within(const RowRange& inner, const std::optional<RowRange>& outer) {
  if (!outer || inner.min < outer->min) return false;
  if (outer->max == RowRange::kUnbounded) return true;
  return inner.max != RowRange::kUnbounded && inner.max <= outer->max;
}

std::optional<RowRange> rowsOfKernel(const GemvKernel& g) {
  return g.fn ? std::optional<RowRange>(g.rows) : std::nullopt;
}

// The fused skinny gemms (and gemm_swiglu) write their silu_mul's result,
// or their rope_kv_append's q (in storage of its own) and pools; a folded
// norm is done by the streamed single-row gemm after it, and cuBLASLt's
// epilogue adds the residual of the norm after a gemm. Each step a
// neighbour does names the rows; the neighbour must run the fused kernel
// at all of them, or the step's work would be lost.
Status linkFusions(std::vector<BoundStep>& steps, const CudaDriver& d) {
  auto mismatch = [&](size_t i, const char* what) {
    return makeError("{}: the plan's variants disagree: {}", steps[i].path, what);
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    BoundStep& s = steps[i];
    if (s.absorbed_rows || s.absorbed_prefill_rows) {
      BoundStep* gemm = i > 0 && steps[i - 1].kind == StepKind::kGemm ? &steps[i - 1] : nullptr;
      if (!gemm || !gemm->fused) return mismatch(i, "absorbed, but the step before is not a fused gemm");
      if (s.absorbed_rows) {
        const bool covered = [&] {
          for (int64_t r = s.absorbed_rows->min; r <= s.absorbed_rows->max; ++r)
            if (!covers(rowsOfKernel(gemm->single), r) && !covers(rowsOfKernel(gemm->skinny), r)) return false;
          return s.absorbed_rows->max != RowRange::kUnbounded;
        }();
        if (!covered) return mismatch(i, "absorbed at rows the gemm before runs no fused skinny kernel");
      }
      if (s.absorbed_prefill_rows &&
          (!gemm->swiglu_fn || gemm->swiglu_rows.min != s.absorbed_prefill_rows->min ||
           gemm->swiglu_rows.max != s.absorbed_prefill_rows->max))
        return mismatch(i, "absorbed_prefill's rows are not the gemm_swiglu's before it");
      if (gemm->swiglu_fn && !s.absorbed_prefill_rows)
        return mismatch(i, "the gemm before runs gemm_swiglu, which this step's variants do not know");
      gemm->fused_y = s.results[0].ptr;
      if (s.kind == StepKind::kRopeKvAppend) gemm->fused_rope = int(i);
      if (gemm->swiglu_fn) {  // the merged [2F, K] bf16 weight, encoded once
        KILN_ASSIGN(w_map, gemmSwiGluWMap(d, gemm->weights[1], gemm->width / 2, gemm->k));
        gemm->swiglu_w_map = w_map;
      }
    }
    if (s.fused && !(i + 1 < steps.size() && steps[i + 1].absorbed_rows))
      return mismatch(i, "a fused gemm whose next step is not absorbed");
    if (s.folded_rows) {
      BoundStep* gemm = i + 1 < steps.size() && steps[i + 1].kind == StepKind::kGemm ? &steps[i + 1] : nullptr;
      if (!gemm || !within(*s.folded_rows, rowsOfKernel(gemm->single)) || gemm->single.tiles == 0)
        return mismatch(i, "folded into the next gemm, whose single-row instance is not the streamed kernel "
                           "(gemv_stream.cuh) that computes it");
      gemm->folded_norm = int(i);
    }
    if (s.norm_of_sum_rows) {
      BoundStep* gemm = i > 0 && steps[i - 1].kind == StepKind::kGemm ? &steps[i - 1] : nullptr;
      if (!gemm || !gemm->residual_rows || gemm->residual_rows->min != s.norm_of_sum_rows->min ||
          gemm->residual_rows->max != s.norm_of_sum_rows->max)
        return mismatch(i, "norm_of_sum's rows are not those at which the gemm before adds the residual");
      gemm->sum_norm = int(i);
    } else if (s.residual_rows && !(i + 1 < steps.size() && steps[i + 1].norm_of_sum_rows)) {
      return mismatch(i, "cublaslt_residual, but the norm after it does not take the sum");
    }
  }
  return {};
}

// A 2:4 sparse gemm's planes on the device (sparse24_image.h). Its sparse
// kernels must take every row count: no other kernel reads its weight's
// image (the batch-invariant mode, which keeps no row-bounded variant, has
// none for it).
Status bindSparse24(const Step& step, const WeightLayout& layout, const WeightStore& weights, BoundStep& s) {
  const GemmParams& gemm = step.as<GemmParams>();
  if (!cuda_codegen::sparse24Weight(gemm) || !runsSparse24Kernels(step)) return {};
  const RowRange& gemv = s.sparse_gemv.rows;
  const RowRange& tiles = s.sparse_gemm.rows;
  if (!s.sparse_gemv.fn || !s.sparse_gemm.fn || gemv.min != 1 || gemv.max == RowRange::kUnbounded ||
      tiles.min != gemv.max + 1 || tiles.max != RowRange::kUnbounded)
    return makeError("{}: a 2:4 sparse gemm runs its sparse_gemv and then its sparse_gemm variant, which together "
                     "take every row count; the chosen ones do not (the batch-invariant mode runs neither)",
                     step.path);
  const BoundWeight& w = *weights.find(step.args[1].id);
  if (!w.sparse24) return makeError("{}: weight {} '{}' is not bound 2:4 sparse", step.path, w.id, w.name);
  s.sparse_metadata = s.weights[1] + CUdeviceptr(sparse24MetadataOffset(s.width, sparse24GemvRowBytes(w)));
  s.sparse_gemm_values =
      gemm.weight_type == "sp24" ? s.weights[1] : layout.at(step.args[1].id, WeightForm::kSparse24Bf16Values);
  s.sparse_gemm_metadata = layout.at(step.args[1].id, WeightForm::kSparse24Mma);
  if (!s.sparse_gemm_values || !s.sparse_gemm_metadata)
    return makeError("{}: the sparse GEMM's planes of weight {} were not uploaded", step.path, w.id);
  return {};
}

}  // namespace

bool runsSparse24Kernels(const Step& step) {
  for (const KernelVariant& v : step.variants)
    if (v.role == Role::kSparseGemv || v.role == Role::kSparseGemm) return true;
  return false;
}

std::string sparse24DenseNotice(const Manifest& manifest, const Entry& entry) {
  for (const Step& step : entry.steps) {
    if (step.kind != StepKind::kGemm || !cuda_codegen::sparse24Weight(step.as<GemmParams>()) ||
        runsSparse24Kernels(step))
      continue;
    std::string reason = cuda_codegen::sparse24RunsDense({manifest.target, manifest.activation_type});
    if (reason.empty()) reason = fmt::format("the plan lists no sparse kernels for {}", step.path);
    return fmt::format("2:4 sparse weights run dense: {}", reason);
  }
  return "";
}

Result<WeightForm> stepWeightForm(const Step& step, size_t arg, WeightForm gemm_form) {
  if (step.kind == StepKind::kEmbedding) {
    const std::string& t = step.as<EmbeddingParams>().table_type;
    if (cuda_codegen::embeddingTableExpands(t)) return WeightForm::kBf16;
    auto f = weightFormOf(t);
    if (!f) return makeError("{} (embedding): table_type: {}", step.path, f.error().message);
    return *f;
  }
  if (step.kind == StepKind::kRmsNorm || step.kind == StepKind::kResidualRmsNorm) {
    std::string t = step.kind == StepKind::kRmsNorm ? step.as<RmsNormParams>().weight_type
                                                    : step.as<ResidualRmsNormParams>().weight_type;
    if (t.empty()) t = "f32";
    auto f = weightFormOf(t);
    if (!f || *f == WeightForm::kRaw) return makeError("{}: norm weight_type {} has no CUDA kernel", step.path, t);
    return *f;
  }
  // The router and the stacked experts: float weights in the plan's form,
  // as moe.cuh's instances read them (kernel_selection.cc's moeVariants).
  if (step.kind == StepKind::kMoeRouter || step.kind == StepKind::kMoeFfn) {
    const std::string& t = step.kind == StepKind::kMoeRouter ? step.as<MoeRouterParams>().weight_type
                                                              : step.as<MoeFfnParams>().weight_type;
    if (t != "f32" && t != "bf16" && t != "f16")
      return makeError("{} ({}): {} experts have no CUDA kernel yet (float weights only)", step.path,
                       stepKindName(step.kind), t);
    return gemm_form;
  }
  // The state-space steps' conv weight and bias, A_log, D, dt_bias and
  // gated norm weight: f32, as ssm.cuh's instances read them (their
  // weight_type / param_type default).
  if (step.kind == StepKind::kSsmConv1d || step.kind == StepKind::kSelectiveScan ||
      step.kind == StepKind::kSsdScan || step.kind == StepKind::kSsmGatedNorm)
    return WeightForm::kF32;
  // Qwen3's per-head q/k norm weights: f32, as rope_kv_append reads them.
  if (step.kind == StepKind::kRopeKvAppend && step.as<RopeKvAppendParams>().qk_norm) return WeightForm::kF32;
  if (step.kind != StepKind::kGemm)
    return makeError("{} ({}): args[{}] is a weight, which this kind does not take", step.path,
                     stepKindName(step.kind), arg);
  // ggml blocks stay blocks for a bf16 plan's kernels (repacked), as do
  // kiln's int8/int4 weights, which the weight store quantizes into q8_0
  // and q4_0 blocks with their scales folded in (their scales arg stays
  // f32, unread); an f32 plan's cuBLASLt takes blocks expanded to f32. The
  // bias takes the plan's form.
  const GemmParams& gemm = step.as<GemmParams>();
  if (arg == 1 && cuda_codegen::sparse24Weight(gemm) && runsSparse24Kernels(step)) return WeightForm::kSparse24;
  const bool blocks = cuda_codegen::gemmBlockType(gemm).has_value();
  if (arg == 1 && blocks && gemm_form == WeightForm::kBf16) return WeightForm::kPacked;
  if (arg == 2 && gemm.scales) return WeightForm::kF32;
  return gemm_form;
}

Result<WeightLayout> layoutWeights(std::initializer_list<const Entry*> entries, const WeightStore& weights,
                                   WeightForm gemm_form) {
  WeightLayout layout;
  for (const Entry* entry : entries) {
    if (!entry) continue;
    for (const Step& step : entry->steps) {
      for (size_t i = 0; i < step.args.size(); ++i) {
        if (step.args[i].kind != StepArg::Kind::kWeight) continue;
        KILN_ASSIGN(form, stepWeightForm(step, i, gemm_form));
        KILN_RETURN_IF_ERROR(layout.add(step, i, weights, form));
      }
      // The sparse GEMM's planes: mma-order metadata, and bf16 values
      // where the gemv reads blocks.
      const bool sparse_gemm = std::any_of(step.variants.begin(), step.variants.end(),
                                           [](const KernelVariant& v) { return v.role == Role::kSparseGemm; });
      if (!sparse_gemm) continue;
      KILN_RETURN_IF_ERROR(layout.add(step, 1, weights, WeightForm::kSparse24Mma));
      if (step.as<GemmParams>().weight_type != "sp24")
        KILN_RETURN_IF_ERROR(layout.add(step, 1, weights, WeightForm::kSparse24Bf16Values));
    }
  }
  return layout;
}

Result<int64_t> moveFusedValues(DeviceMemory& memory, ActivationArena& arena, const Entry& entry, int64_t max_tokens,
                                const KernelSet& kernels) {
  std::vector<int64_t> fused_q, moved_sums;
  for (size_t i = 0; i < entry.steps.size(); ++i) {
    for (const ChosenVariant& v : kernels.chosen(i)) {
      if (!v.own_storage) continue;
      if (v.role == Role::kNormOfSum) moved_sums.push_back(entry.steps[i].results[0]);
      else fused_q.push_back(entry.steps[i].results[0]);
    }
  }
  KILN_ASSIGN(q_bytes, arena.shareOwnBuffer(memory, entry, max_tokens, fused_q, "the fused qkv projections' q"));
  KILN_ASSIGN(sum_bytes, arena.shareOwnBuffer(memory, entry, max_tokens, moved_sums,
                                              "the residual sums the gemm epilogues write"));
  return q_bytes + sum_bytes;
}

Result<int64_t> allocateExpandedWeights(DeviceMemory& memory, std::initializer_list<std::vector<BoundStep>*> lists) {
  int64_t bytes = 0;
  for (const std::vector<BoundStep>* steps : lists)
    for (const BoundStep& s : *steps)
      if (s.dequantize_fn) bytes = std::max(bytes, s.width * s.k * 2);
  if (bytes == 0) return int64_t(0);
  KILN_ASSIGN(buffer, memory.alloc(bytes, "the block-quantized weights expanded for cuBLASLt"));
  for (std::vector<BoundStep>* steps : lists)
    for (BoundStep& s : *steps)
      if (s.dequantize_fn) s.dequantized = buffer;
  return bytes;
}

Result<int64_t> allocateMoeScratch(DeviceMemory& memory, std::initializer_list<std::vector<BoundStep>*> lists,
                                   int64_t max_tokens) {
  int64_t act = 0, partial = 0;
  for (const std::vector<BoundStep>* steps : lists)
    for (const BoundStep& s : *steps)
      if (s.kind == StepKind::kMoeFfn) {
        act = std::max(act, max_tokens * s.k * s.ffn * 4);
        partial = std::max(partial, max_tokens * s.k * s.width * 4);
      }
  if (act == 0) return int64_t(0);
  KILN_ASSIGN(act_buffer, memory.alloc(act, "the experts' activations (moe_ffn slots)"));
  KILN_ASSIGN(partial_buffer, memory.alloc(partial, "the experts' weighted outputs (moe_ffn slots)"));
  for (std::vector<BoundStep>* steps : lists)
    for (BoundStep& s : *steps)
      if (s.kind == StepKind::kMoeFfn) {
        s.moe_act = act_buffer;
        s.moe_partial = partial_buffer;
      }
  return act + partial;
}

Result<DeviceValue> EntryPlacement::value(const std::string& path, int64_t id, const std::string& where) const {
  const EntryValue* v = entry.findValue(id);
  const EntryValue* storage = v;
  while (storage && storage->view_of) storage = entry.findValue(*storage->view_of);
  if (!v || !storage) return makeError("{}: {}: unknown value id {}", path, where, id);
  if (v->type != "bf16" && v->type != "f32" && v->type != "i32")
    return makeError("{}: {}: value {} has type {}; the CUDA executor holds bf16 or f32 values (and i32 expert ids)",
                     path, where, id, v->type);
  if (v->rows == ValueRows::kFixed)
    return makeError("{}: {}: value {} has fixed rows; the CUDA executor plans batch rows only", path, where, id);
  DeviceValue dv;
  dv.elem = v->type == "bf16" ? 2 : 4;
  dv.integer = v->type == "i32";
  dv.ptr = arena.base + CUdeviceptr(storage->offset * max_tokens);
  dv.width = v->row_bytes / dv.elem;
  dv.per_sequence = v->rows == ValueRows::kSequences;
  dv.valid = true;
  if (auto own = arena.own_storage.find(storage->id); own != arena.own_storage.end()) {
    dv.ptr = own->second;
    return dv;
  }
  if (storage->offset * max_tokens + storage->row_bytes * max_tokens > arena.bytes)
    return makeError("{}: {}: value {} lies past the arena", path, where, id);
  return dv;
}

Result<std::vector<BoundStep>> bindSteps(const Manifest& manifest, const EntryPlacement& placement,
                                         const WeightStore& weights, const KvPoolConfig& kv, const KernelSet& kernels,
                                         const CudaDriver& d) {
  const bool f32_plan = manifest.activation_type == "f32";
  const WeightForm gemm_form = f32_plan ? WeightForm::kF32 : WeightForm::kBf16;
  const std::vector<Step>& entry_steps = placement.entry.steps;
  // Verify's tree positions and mask are computed on the host and staged
  // with the inputs: the steps that read them read those.
  std::map<int64_t, InputId> staged;
  for (const Step& step : entry_steps) {
    if (step.kind == StepKind::kTreePositions && step.results.size() == 1) staged[step.results[0]] = kTreePositions;
    if (step.kind == StepKind::kTreeMask && step.results.size() == 1) staged[step.results[0]] = kTreeMask;
  }
  std::vector<BoundStep> steps;
  for (size_t i = 0; i < entry_steps.size(); ++i) {
    const Step& step = entry_steps[i];
    BoundStep s;
    s.kind = step.kind;
    s.path = step.path;
    if (cuda_codegen::runsOnHost(step.kind)) {  // no operands on the device
      KILN_RETURN_IF_ERROR(bindParams(step, weights, s));
      steps.push_back(std::move(s));
      continue;
    }
    KILN_RETURN_IF_ERROR(bindKernels(kernels, i, s));
    const size_t na = step.args.size();
    s.args.resize(na);
    s.weights.assign(na, 0);
    s.inputs.assign(na, -1);
    s.pools.assign(na, 0);
    s.pool_scales.assign(na, 0);
    for (size_t a = 0; a < na; ++a) {
      const StepArg& arg = step.args[a];
      switch (arg.kind) {
        case StepArg::Kind::kValue: {
          if (auto it = staged.find(arg.id); it != staged.end()) {
            s.inputs[a] = it->second;
            break;
          }
          KILN_ASSIGN(v, placement.value(step.path, arg.id, fmt::format("args[{}]", a)));
          s.args[a] = v;
          break;
        }
        case StepArg::Kind::kWeight: {
          KILN_ASSIGN(form, stepWeightForm(step, a, gemm_form));
          s.weights[a] = placement.weights.at(arg.id, form);
          break;
        }
        case StepArg::Kind::kInput: {
          auto id = parseInput(arg.input);
          if (!id)
            return makeError("{}: args[{}]: input '{}' is not one the CUDA executor provides", step.path, a,
                             arg.input);
          s.inputs[a] = *id;
          break;
        }
        case StepArg::Kind::kPool: {
          if (arg.layer < 0 || arg.layer >= kv.layers)
            return makeError("{}: args[{}]: pool layer {} is outside the pool's {} layers", step.path, a, arg.layer,
                             kv.layers);
          s.pools[a] = placement.pools.pool(arg.layer, arg.role);
          s.pool_scales[a] = placement.pools.scales(arg.layer, arg.role);
          break;
        }
        case StepArg::Kind::kState: {
          const StatePools* states = placement.states;
          if (!states || arg.layer < 0 || size_t(arg.layer) >= states->layers.size())
            return makeError("{}: args[{}]: state layer {} is outside the state pools' {} layers", step.path, a,
                             arg.layer, states ? states->layers.size() : 0);
          const StateRole want = step.kind == StepKind::kSsmConv1d ? StateRole::kConv : StateRole::kSsm;
          if (arg.state_role != want)
            return makeError("{}: args[{}]: expected the layer's {} state pool", step.path, a,
                             want == StateRole::kConv ? "conv" : "ssm");
          s.pools[a] = states->pool(arg.layer, arg.state_role);
          break;
        }
      }
    }
    for (size_t r = 0; r < step.results.size(); ++r) {
      KILN_ASSIGN(v, placement.value(step.path, step.results[r], fmt::format("results[{}]", r)));
      s.results.push_back(v);
    }
    if (s.results.empty() && step.kind != StepKind::kKvAppend) return makeError("{}: no results", step.path);
    KILN_RETURN_IF_ERROR(checkValueTypes(
        step,
        cuda_codegen::withActivationTypes(stepKindName(step.kind), toJson(step.params), manifest.activation_type),
        f32_plan ? 4 : 2, s.args, s.results));
    KILN_RETURN_IF_ERROR(bindParams(step, weights, s));
    if (step.kind == StepKind::kGemm) KILN_RETURN_IF_ERROR(bindSparse24(step, placement.weights, weights, s));
    steps.push_back(std::move(s));
  }
  KILN_RETURN_IF_ERROR(linkFusions(steps, d));
  return steps;
}

}  // namespace kiln::cuda
