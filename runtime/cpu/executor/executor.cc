#include "runtime/cpu/executor/executor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "runtime/backend/plan_kv_pool.h"
#include "runtime/backend/tree_verify.h"
#include "runtime/cpu/executor/bound_step.h"
#include "runtime/cpu/kernels/elementwise.h"
#include "runtime/cpu/kernels/embed.h"
#include "runtime/cpu/kernels/linear.h"
#include "runtime/cpu/kernels/sparse24_linear.h"
#include "runtime/cpu/kernels/moe.h"
#include "runtime/cpu/kernels/paged_attention.h"
#include "runtime/cpu/kernels/paged_kv.h"
#include "runtime/cpu/kernels/rms_norm.h"
#include "runtime/cpu/kernels/ssm.h"

namespace kiln::cpu {

namespace {

std::optional<InputId> parseInput(std::string_view name) {
  if (name == "tokens") return InputId::kTokens;
  if (name == "positions") return InputId::kPositions;
  if (name == "slot_mapping") return InputId::kSlotMapping;
  if (name == "block_tables") return InputId::kBlockTables;
  if (name == "query_start") return InputId::kQueryStart;
  if (name == "kv_lens") return InputId::kKvLens;
  if (name == "parents") return InputId::kParents;
  if (name == "base_positions") return InputId::kBasePositions;
  if (name == "state_slots") return InputId::kStateSlots;
  return std::nullopt;
}

constexpr int64_t kAlign = 64;
int64_t alignUp(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

}  // namespace

CpuExecutor::~CpuExecutor() { std::free(arena_); }

RopeParams ropeParamsOf(const RopeKvAppendParams& q) {
  RopeParams rope;
  rope.theta = float(q.rope_theta);
  rope.style = q.rope_style == "interleaved" ? RopeStyle::kInterleaved : RopeStyle::kHalf;
  rope.scaling = q.rope_scaling == "linear"   ? RopeScaling::kLinear
                 : q.rope_scaling == "llama3" ? RopeScaling::kLlama3
                                              : RopeScaling::kNone;
  if (rope.scaling != RopeScaling::kNone) rope.factor = float(q.rope_factor);
  if (rope.scaling == RopeScaling::kLlama3) {
    rope.low_freq_factor = float(q.rope_low_freq_factor);
    rope.high_freq_factor = float(q.rope_high_freq_factor);
    rope.original_max_position = int(q.rope_original_max_position);
  }
  return rope;
}

namespace {

// Binds one step: resolves its operands against the arena, weights and pool
// and reads the kind's params, checking every shape the kernels rely on.
class StepBinder {
 public:
  StepBinder(const Manifest& manifest, const Entry& entry, const WeightStore& weights,
             BlockPool& pool, uint8_t* arena, int64_t max_tokens, StatePool* state_pool = nullptr)
      : manifest_(manifest), entry_(entry), weights_(weights), pool_(pool), arena_(arena),
        max_tokens_(max_tokens), state_pool_(state_pool) {}

  Result<CpuExecutor::BoundStep> bind(const Step& step);
  Result<Operand> value(const Step& step, int64_t id, const std::string& where);

 private:
  template <typename... Args>
  Error fail(const Step& step, fmt::format_string<Args...> format, Args&&... args) {
    return makeError("{} ({}): {}", step.path, stepKindName(step.kind),
                     fmt::format(format, std::forward<Args>(args)...));
  }
  Result<Operand> operand(const Step& step, const StepArg& arg, size_t index);
  Status checkWidth(const Step& step, const Operand& v, int64_t width, std::string_view what);
  Status checkWeight(const Step& step, const Operand& w, const std::vector<int64_t>& shape,
                     std::string_view what, bool want_f32);

  const Manifest& manifest_;
  const Entry& entry_;
  const WeightStore& weights_;
  BlockPool& pool_;
  uint8_t* arena_;
  int64_t max_tokens_;
  StatePool* state_pool_;
};

Result<Operand> StepBinder::value(const Step& step, int64_t id, const std::string& where) {
  const EntryValue* v = entry_.findValue(id);
  const EntryValue* storage = v;
  while (storage && storage->view_of) storage = entry_.findValue(*storage->view_of);
  if (!v || !storage) return fail(step, "{}: unknown value id {}", where, id);
  const bool index_value = v->type == "i32" || v->type == "i8";
  if (v->type != "f32" && !index_value)
    return fail(step, "{}: value {} has type {}; the CPU executor keeps activations in f32 (and verify's "
                      "indices in i32 or i8)",
                where, id, v->type);
  if (v->rows == ValueRows::kFixed)
    return fail(step, "{}: value {} has fixed rows; the CPU executor plans batch rows only",
                where, id);
  const int element_bytes = v->type == "i8" ? 1 : 4;
  if (v->row_bytes % element_bytes != 0)
    return fail(step, "{}: value {} has row_bytes {}, not whole {} elements", where, id,
                v->row_bytes, v->type);
  Operand op;
  op.kind = StepArg::Kind::kValue;
  op.storage_begin = storage->offset * max_tokens_;
  op.storage_end = op.storage_begin + storage->row_bytes * max_tokens_;
  op.value_id = storage->id;
  op.data = reinterpret_cast<float*>(arena_ + op.storage_begin);
  op.width = v->row_bytes / element_bytes;
  op.element_bytes = element_bytes;
  op.integer = index_value;
  op.per_sequence = v->rows == ValueRows::kSequences;
  return op;
}

Result<Operand> StepBinder::operand(const Step& step, const StepArg& arg, size_t index) {
  const std::string where = fmt::format("args[{}]", index);
  switch (arg.kind) {
    case StepArg::Kind::kValue: return value(step, arg.id, where);
    case StepArg::Kind::kWeight: {
      Operand op;
      op.kind = arg.kind;
      op.weight = weights_.find(arg.id);
      if (!op.weight || !op.weight->kernel_ready)
        return fail(step, "{}: weight {} is not bound by the weight store", where, arg.id);
      return op;
    }
    case StepArg::Kind::kPool: {
      Operand op;
      op.kind = arg.kind;
      if (arg.layer < 0 || arg.layer >= pool_.config().layers)
        return fail(step, "{}: pool layer {} is outside the pool's {} layers", where, arg.layer,
                    pool_.config().layers);
      op.pool = arg.role == PoolRole::kKey ? pool_.keys(arg.layer) : pool_.values(arg.layer);
      op.pool_scales = arg.role == PoolRole::kKey ? pool_.keyScales(arg.layer) : pool_.valueScales(arg.layer);
      return op;
    }
    case StepArg::Kind::kState: {
      if (!state_pool_ || arg.layer < 0 || size_t(arg.layer) >= state_pool_->config().layers.size())
        return fail(step, "{}: state layer {} is outside the state pool's {} layers", where, arg.layer,
                    state_pool_ ? state_pool_->config().layers.size() : 0);
      Operand op;
      op.kind = arg.kind;
      op.state_layer = arg.layer;
      op.state_role = arg.state_role;
      return op;
    }
    case StepArg::Kind::kInput: {
      auto id = parseInput(arg.input);
      if (!id)
        return fail(step, "{}: input '{}' is not one the CPU executor provides (tokens, "
                          "positions, slot_mapping, block_tables, query_start, kv_lens, parents, "
                          "base_positions, state_slots)",
                    where, arg.input);
      Operand op;
      op.kind = arg.kind;
      op.input = *id;
      return op;
    }
  }
  return fail(step, "{}: unknown argument kind", where);
}

Status StepBinder::checkWidth(const Step& step, const Operand& v, int64_t width,
                              std::string_view what) {
  if (v.width != width)
    return fail(step, "{} has rows of {} f32, expected {}", what, v.width, width);
  return {};
}

Status StepBinder::checkWeight(const Step& step, const Operand& w,
                               const std::vector<int64_t>& shape, std::string_view what,
                               bool want_f32) {
  if (w.weight->shape != shape)
    return fail(step, "{} weight {} '{}' has shape {}, expected {}", what, w.weight->id,
                w.weight->name, formats::shapeToString(w.weight->shape),
                formats::shapeToString(shape));
  if (want_f32 && w.weight->type != WeightType::F32)
    return fail(step, "{} weight {} '{}' is {}, expected f32", what, w.weight->id,
                w.weight->name, weightTypeName(w.weight->type));
  return {};
}

bool overlaps(const Operand& a, const Operand& b) {
  return a.kind == StepArg::Kind::kValue && b.kind == StepArg::Kind::kValue &&
         a.storage_begin < b.storage_end && b.storage_begin < a.storage_end;
}

#define KILN_ASSIGN(var, expr)                 \
  auto var##_result = (expr);                  \
  if (!var##_result.ok()) return var##_result.error(); \
  auto var = var##_result.take()

Result<CpuExecutor::BoundStep> StepBinder::bind(const Step& step) {
  CpuExecutor::BoundStep s;
  s.kind = step.kind;
  s.path = step.path;
  for (size_t i = 0; i < step.args.size(); ++i) {
    KILN_ASSIGN(op, operand(step, step.args[i], i));
    s.args.push_back(op);
  }
  for (size_t i = 0; i < step.results.size(); ++i) {
    KILN_ASSIGN(op, value(step, step.results[i], fmt::format("results[{}]", i)));
    s.results.push_back(op);
  }
  static const Operand kNoResult;  // kv_append writes the pools alone
  const Operand& r0 = s.results.empty() ? kNoResult : s.results[0];
  // Only verify's index steps and the operands that carry their values
  // (positions, the tree mask, the accepted path) are integers.
  const bool index_kind = step.kind == StepKind::kTreePositions || step.kind == StepKind::kTreeMask ||
                          step.kind == StepKind::kAccept;
  // ... and the experts each token is routed to.
  auto indexResult = [&](size_t i) { return index_kind || (step.kind == StepKind::kMoeRouter && i == 1); };
  for (size_t i = 0; i < s.args.size(); ++i) {
    const bool index_arg = (step.kind == StepKind::kRopeKvAppend && s.args[i].kind == StepArg::Kind::kValue &&
                            i == (step.as<RopeKvAppendParams>().merged_qkv ? 1u : 3u)) ||
                           (step.kind == StepKind::kPagedAttention && i == 6) ||
                           (step.kind == StepKind::kMoeFfn && i == 2);
    if (s.args[i].kind == StepArg::Kind::kValue && s.args[i].integer != index_arg)
      return fail(step, "args[{}] is {}, expected {}", i, s.args[i].integer ? "an index value" : "f32",
                  index_arg ? "an index value (i32 positions, i8 tree mask)" : "f32");
  }
  for (size_t i = 0; i < s.results.size(); ++i)
    if (s.results[i].integer != indexResult(i))
      return fail(step, "results[{}] is {}, expected {}", i, s.results[i].integer ? "an index value" : "f32",
                  indexResult(i) ? "i32 or i8" : "f32");
  // Kernels that read whole inputs before writing (or write row by row what
  // they read) may work in place; the others must not alias.
  auto noAlias = [&]() -> Status {
    for (size_t i = 0; i < s.args.size(); ++i)
      for (size_t j = 0; j < s.results.size(); ++j)
        if (overlaps(s.args[i], s.results[j]))
          return fail(step, "results[{}] shares arena bytes with args[{}]; this kind cannot "
                            "run in place",
                      j, i);
    return {};
  };

  switch (step.kind) {
    case StepKind::kAllReduce:
    case StepKind::kSend:
    case StepKind::kRecv:
      return makeError("{}: {} exchanges activations between ranks; no backend runs it yet (issue #26)", step.path,
                       stepKindName(step.kind));
    case StepKind::kEmbedding: {
      const int64_t hidden = step.as<EmbeddingParams>().hidden;
      s.width = hidden;
      const BoundWeight& table = *s.args[1].weight;
      if (table.shape.size() != 2 || table.shape[1] != hidden)
        return fail(step, "table weight {} '{}' has shape {}, expected [vocab, {}]", table.id,
                    table.name, formats::shapeToString(table.shape), hidden);
      s.k = table.shape[0];  // vocab
      s.embed_scale = float(step.as<EmbeddingParams>().scale);
      KILN_RETURN_IF_ERROR(checkWidth(step, r0, hidden, "results[0]"));
      break;
    }
    case StepKind::kRmsNorm:
    case StepKind::kResidualRmsNorm: {
      const bool residual = step.kind == StepKind::kResidualRmsNorm;
      const int64_t hidden = residual ? step.as<ResidualRmsNormParams>().hidden : step.as<RmsNormParams>().hidden;
      const double eps = residual ? step.as<ResidualRmsNormParams>().epsilon : step.as<RmsNormParams>().epsilon;
      s.width = hidden;
      s.epsilon = float(eps);
      size_t w = s.args.size() - 1;
      for (size_t i = 0; i < w; ++i)
        KILN_RETURN_IF_ERROR(checkWidth(step, s.args[i], hidden, fmt::format("args[{}]", i)));
      KILN_RETURN_IF_ERROR(checkWeight(step, s.args[w], {hidden}, "norm", /*want_f32=*/true));
      if (residual) {
        const bool writes_sum = step.as<ResidualRmsNormParams>().writes_sum;
        s.writes_sum = writes_sum;
        // The sum is formed first (it may overwrite x or r), the norm reads
        // only the sum; the normed result must not overwrite the sum.
        if (writes_sum && overlaps(s.results[0], s.results[1]))
          return fail(step, "the sum and the normed result share arena bytes");
      }
      for (size_t i = 0; i < s.results.size(); ++i)
        KILN_RETURN_IF_ERROR(checkWidth(step, s.results[i], hidden, fmt::format("results[{}]", i)));
      break;
    }
    case StepKind::kGemm: {
      const GemmParams& g = step.as<GemmParams>();
      const int64_t n = g.n, k = g.k;
      const bool bias = g.bias, scales = g.scales;
      s.width = n;
      s.k = k;
      KILN_RETURN_IF_ERROR(checkWidth(step, s.args[0], k, "args[0] (x)"));
      KILN_RETURN_IF_ERROR(checkWidth(step, r0, n, "results[0]"));
      KILN_RETURN_IF_ERROR(checkWeight(step, s.args[1], {n, k}, "W", /*want_f32=*/false));
      // kiln's own schemes are bound in the kernels' layouts, scales folded
      // in (runtime/weights/weight_quantization.h): int8 as q8_0 blocks,
      // int4 as q4_0 blocks, fp8 as f32. (The plan checked that exactly
      // these take a scales operand.)
      const std::string& wt = g.weight_type;
      // 2:4 sparse weights bind their kept values the same ways (f32 for
      // sp24), with the metadata after them (runtime/weights/sparse24.h).
      const bool sparse24 = wt == "sp24" || wt == "int8sp24" || wt == "int4sp24";
      if (sparse24 != s.args[1].weight->sparse24)
        return fail(step, "weight_type is {} but weight {} is bound {}", wt, s.args[1].weight->id,
                    s.args[1].weight->sparse24 ? "2:4 sparse" : "dense");
      const std::string bound_as = wt == "int8" || wt == "int8sp24"   ? "q8_0"
                                   : wt == "int4" || wt == "int4sp24" ? "q4_0"
                                   : wt == "fp8e4m3" || wt == "sp24"  ? "f32"
                                                                      : wt;
      if (bound_as != weightTypeName(s.args[1].weight->type) &&
          !(s.args[1].weight->format_type == formats::ElementType::F32 && bound_as == "f32"))
        return fail(step, "weight_type is {} but weight {} is bound as {}", wt, s.args[1].weight->id,
                    weightTypeName(s.args[1].weight->type));
      if (!sparse24 && k % quantBlockElements(s.args[1].weight->type) != 0)
        return fail(step, "k = {} is not a multiple of {} for a {} weight", k,
                    quantBlockElements(s.args[1].weight->type),
                    weightTypeName(s.args[1].weight->type));
      // args: x, W, [scales], [bias] (counted by the plan). The scales are
      // already folded into W's blocks, so the GEMM reads only x, W and the bias.
      if (scales && s.args[2].kind != StepArg::Kind::kWeight)
        return fail(step, "the scales operand must be a weight");
      if (bias) {
        if (scales) s.args.erase(s.args.begin() + 2);
        KILN_RETURN_IF_ERROR(checkWeight(step, s.args[2], {n}, "bias", true));
      } else if (scales) {
        s.args.pop_back();
      }
      if (s.results[0].per_sequence != s.args[0].per_sequence)
        return fail(step, "x and y have different row counts (tokens vs sequences)");
      KILN_RETURN_IF_ERROR(noAlias());
      break;
    }
    case StepKind::kRopeKvAppend: {
      const RopeKvAppendParams& q = step.as<RopeKvAppendParams>();
      const int64_t heads = q.attn.heads, kv_heads = q.attn.kv_heads, head_dim = q.attn.head_dim;
      const bool merged = q.merged_qkv;
      s.heads = int(heads);
      s.kv_heads = int(kv_heads);
      s.head_dim = int(head_dim);
      s.merged = merged;
      s.rope = ropeParamsOf(q);
      s.qk_norm = q.qk_norm;
      s.epsilon = float(q.qk_norm_epsilon);
      if (q.qk_norm) {
        const size_t first = merged ? 5 : 7;
        KILN_RETURN_IF_ERROR(checkWeight(step, s.args[first], {head_dim}, "q_norm", /*want_f32=*/true));
        KILN_RETURN_IF_ERROR(checkWeight(step, s.args[first + 1], {head_dim}, "k_norm", /*want_f32=*/true));
      }
      auto freqs = ropeInvFreq(s.rope, int(head_dim));
      if (!freqs.ok()) return fail(step, "{}", freqs.error().message);
      const int64_t qd = heads * head_dim, kd = kv_heads * head_dim;
      if (merged) {
        KILN_RETURN_IF_ERROR(checkWidth(step, s.args[0], qd + 2 * kd, "args[0] (qkv)"));
      } else {
        KILN_RETURN_IF_ERROR(checkWidth(step, s.args[0], qd, "args[0] (q)"));
        KILN_RETURN_IF_ERROR(checkWidth(step, s.args[1], kd, "args[1] (k)"));
        KILN_RETURN_IF_ERROR(checkWidth(step, s.args[2], kd, "args[2] (v)"));
      }
      KILN_RETURN_IF_ERROR(checkWidth(step, r0, qd, "results[0] (q roped)"));
      // The roped q is written row by row from q's row; rows overlap only in
      // place (same storage), which copyRows handles with memmove.
      if (merged && overlaps(s.args[0], r0) && s.args[0].data != r0.data)
        return fail(step, "results[0] partly overlaps args[0]");
      break;
    }
    case StepKind::kPagedAttention: {
      const PagedAttentionParams& a = step.as<PagedAttentionParams>();
      const int64_t heads = a.attn.heads, kv_heads = a.attn.kv_heads, head_dim = a.attn.head_dim;
      const double scale = a.scale;
      if (a.tree_mask && s.args[6].element_bytes != 1)
        return fail(step, "args[6] (tree_mask) must be i8");
      s.heads = int(heads);
      s.kv_heads = int(kv_heads);
      s.head_dim = int(head_dim);
      s.scale = float(scale);
      s.sliding_window = a.sliding_window;
      KILN_RETURN_IF_ERROR(checkWidth(step, s.args[0], heads * head_dim, "args[0] (q)"));
      KILN_RETURN_IF_ERROR(checkWidth(step, r0, heads * head_dim, "results[0]"));
      KILN_RETURN_IF_ERROR(noAlias());
      break;
    }
    case StepKind::kSiluMul: {
      const int64_t ffn = step.as<SiluMulParams>().ffn;
      const bool merged = step.as<SiluMulParams>().merged_gate_up;
      s.width = ffn;
      s.merged = merged;
      s.gelu_tanh = step.as<SiluMulParams>().activation == "gelu_tanh";
      if (merged) {
        KILN_RETURN_IF_ERROR(checkWidth(step, s.args[0], 2 * ffn, "args[0] (gate_up)"));
        KILN_RETURN_IF_ERROR(noAlias());
      } else {
        KILN_RETURN_IF_ERROR(checkWidth(step, s.args[0], ffn, "args[0] (gate)"));
        KILN_RETURN_IF_ERROR(checkWidth(step, s.args[1], ffn, "args[1] (up)"));
      }
      KILN_RETURN_IF_ERROR(checkWidth(step, r0, ffn, "results[0]"));
      break;
    }
    case StepKind::kKvAppend: {
      const KvAppendParams& p = step.as<KvAppendParams>();
      s.kv_heads = int(p.kv_heads);
      s.head_dim = int(p.head_dim);
      for (size_t i : {0u, 1u})
        KILN_RETURN_IF_ERROR(checkWidth(step, s.args[i], p.kv_heads * p.head_dim, fmt::format("args[{}]", i)));
      if (s.args[3].pool_scales || s.args[4].pool_scales)
        return fail(step, "kv_append writes float pools only (kv_cache.type {})", manifest_.kv_cache.type);
      break;
    }
    case StepKind::kAdd:
    case StepKind::kMul:
    case StepKind::kSilu:
    case StepKind::kReluSquared: {
      const int64_t width = step.as<ElementwiseParams>().width;
      s.width = width;
      for (size_t i = 0; i < s.args.size(); ++i)
        KILN_RETURN_IF_ERROR(checkWidth(step, s.args[i], width, fmt::format("args[{}]", i)));
      KILN_RETURN_IF_ERROR(checkWidth(step, r0, width, "results[0]"));
      break;
    }
    case StepKind::kSplit: {
      const int64_t axis = step.as<SplitParams>().axis;
      const std::vector<int64_t>& sizes = step.as<SplitParams>().sizes;
      const EntryValue* x = entry_.findValue(step.args[0].id);
      int64_t rank = int64_t(x->shape.size());
      if (axis != rank - 1 && axis != -1)
        return fail(step, "split along axis {} of a rank-{} value; the CPU executor splits the "
                          "last axis only",
                    axis, rank);
      int64_t total = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        KILN_RETURN_IF_ERROR(
            checkWidth(step, s.results[i], sizes[i], fmt::format("results[{}]", i)));
        total += sizes[i];
      }
      KILN_RETURN_IF_ERROR(checkWidth(step, s.args[0], total, "args[0]"));
      s.sizes = sizes;
      KILN_RETURN_IF_ERROR(noAlias());
      break;
    }
    case StepKind::kTreePositions: {
      if (r0.element_bytes != 4 || r0.width != 1 || r0.per_sequence)
        return fail(step, "results[0] must be i32 [N] (one position a token)");
      break;
    }
    case StepKind::kTreeMask: {
      if (r0.element_bytes != 1 || r0.per_sequence)
        return fail(step, "results[0] must be i8 [N, nodes]");
      break;
    }
    case StepKind::kAccept: {
      if (step.as<AcceptParams>().mode != "greedy")
        return fail(step, "accept mode {} is not run by the CPU executor (greedy only)", step.as<AcceptParams>().mode);
      if (s.args[0].per_sequence) return fail(step, "args[0] (logits) must have a row per token");
      for (size_t i = 0; i < 2; ++i)
        if (s.results[i].element_bytes != 4) return fail(step, "results[{}] must be i32", i);
      if (s.results[1].width != 1) return fail(step, "results[1] (count) must be i32 [B]");
      KILN_RETURN_IF_ERROR(noAlias());
      break;
    }
    case StepKind::kMoeRouter: {
      const MoeRouterParams& p = step.as<MoeRouterParams>();
      s.experts = p.experts;
      s.top_k = p.top_k;
      s.normalize = p.normalize;
      s.k = p.hidden;
      if (p.hidden > 0) {
        KILN_RETURN_IF_ERROR(checkWidth(step, s.args[0], p.hidden, "args[0] (h)"));
        KILN_RETURN_IF_ERROR(checkWeight(step, s.args[1], {p.experts, p.hidden}, "router", /*want_f32=*/false));
        if (p.hidden % quantBlockElements(s.args[1].weight->type) != 0)
          return fail(step, "hidden {} is not whole {} blocks", p.hidden, weightTypeName(s.args[1].weight->type));
      } else {
        KILN_RETURN_IF_ERROR(checkWidth(step, s.args[0], p.experts, "args[0] (router logits)"));
      }
      for (size_t i = 0; i < 2; ++i) {
        KILN_RETURN_IF_ERROR(checkWidth(step, s.results[i], p.top_k, fmt::format("results[{}]", i)));
        if (s.results[i].element_bytes != 4) return fail(step, "results[{}] must be 4-byte elements", i);
      }
      KILN_RETURN_IF_ERROR(noAlias());
      break;
    }
    case StepKind::kMoeFfn: {
      const MoeFfnParams& p = step.as<MoeFfnParams>();
      s.width = p.hidden;
      s.top_k = p.top_k;
      KILN_RETURN_IF_ERROR(checkWidth(step, s.args[0], p.hidden, "args[0] (x)"));
      KILN_RETURN_IF_ERROR(checkWidth(step, s.args[1], p.top_k, "args[1] (weights)"));
      KILN_RETURN_IF_ERROR(checkWidth(step, s.args[2], p.top_k, "args[2] (experts)"));
      if (s.args[2].element_bytes != 4) return fail(step, "args[2] (experts) must be i32");
      KILN_RETURN_IF_ERROR(checkWeight(step, s.args[3], {p.experts, p.ffn, p.hidden}, "gate", false));
      KILN_RETURN_IF_ERROR(checkWeight(step, s.args[4], {p.experts, p.ffn, p.hidden}, "up", false));
      KILN_RETURN_IF_ERROR(checkWeight(step, s.args[5], {p.experts, p.hidden, p.ffn}, "down", false));
      const WeightType type = s.args[3].weight->type;
      if (s.args[4].weight->type != type || s.args[5].weight->type != type)
        return fail(step, "gate, up and down are {}, {} and {}; the experts take one type",
                    weightTypeName(type), weightTypeName(s.args[4].weight->type),
                    weightTypeName(s.args[5].weight->type));
      if (p.hidden % quantBlockElements(type) != 0 || p.ffn % quantBlockElements(type) != 0)
        return fail(step, "hidden {} and ffn {} must be whole {} blocks", p.hidden, p.ffn, weightTypeName(type));
      s.expert_weights = ExpertWeights{s.args[3].weight->data, s.args[4].weight->data, s.args[5].weight->data,
                                       type, p.experts, p.ffn, p.hidden};
      KILN_RETURN_IF_ERROR(checkWidth(step, r0, p.hidden, "results[0]"));
      KILN_RETURN_IF_ERROR(noAlias());
      break;
    }
    case StepKind::kSsmConv1d: {
      const SsmConv1dParams& p = step.as<SsmConv1dParams>();
      s.width = p.channels;
      s.conv_width = p.width;
      s.silu = p.silu;
      const StateLayerShape& shape = state_pool_->config().layers[size_t(s.args[1].state_layer)];
      if (s.args[1].state_role != StateRole::kConv || shape.conv_rows != p.width - 1 || shape.conv_channels != p.channels)
        return fail(step, "args[1] must be a conv state pool of [{}, {}] (its layer's is [{}, {}])", p.width - 1,
                    p.channels, shape.conv_rows, shape.conv_channels);
      KILN_RETURN_IF_ERROR(checkWidth(step, s.args[0], p.channels, "args[0] (x)"));
      KILN_RETURN_IF_ERROR(checkWeight(step, s.args[2], {p.channels, 1, p.width}, "conv", /*want_f32=*/true));
      if (p.bias != (s.args.size() == 6))
        return fail(step, "bias is {} but the step has {} args", p.bias, s.args.size());
      if (p.bias) KILN_RETURN_IF_ERROR(checkWeight(step, s.args[5], {p.channels}, "bias", /*want_f32=*/true));
      KILN_RETURN_IF_ERROR(checkWidth(step, r0, p.channels, "results[0]"));
      KILN_RETURN_IF_ERROR(noAlias());
      break;
    }
    case StepKind::kSelectiveScan: {
      const SelectiveScanParams& p = step.as<SelectiveScanParams>();
      s.width = p.channels;
      s.state_size = p.state;
      const StateLayerShape& shape = state_pool_->config().layers[size_t(s.args[6].state_layer)];
      if (s.args[6].state_role != StateRole::kSsm || shape.ssm_elements != p.channels * p.state)
        return fail(step, "args[6] must be an SSM state pool of {} x {} (its layer's holds {})", p.channels, p.state,
                    shape.ssm_elements);
      for (size_t i : {0u, 1u}) KILN_RETURN_IF_ERROR(checkWidth(step, s.args[i], p.channels, fmt::format("args[{}]", i)));
      for (size_t i : {3u, 4u}) KILN_RETURN_IF_ERROR(checkWidth(step, s.args[i], p.state, fmt::format("args[{}]", i)));
      KILN_RETURN_IF_ERROR(checkWeight(step, s.args[2], {p.channels, p.state}, "a_log", /*want_f32=*/true));
      KILN_RETURN_IF_ERROR(checkWeight(step, s.args[5], {p.channels}, "d", /*want_f32=*/true));
      KILN_RETURN_IF_ERROR(checkWidth(step, r0, p.channels, "results[0]"));
      KILN_RETURN_IF_ERROR(noAlias());
      break;
    }
    case StepKind::kSsdScan: {
      const SsdScanParams& p = step.as<SsdScanParams>();
      s.heads = int(p.heads);
      s.head_dim = int(p.head_dim);
      s.groups = p.groups;
      s.state_size = p.state;
      s.chunk_size = p.chunk_size;
      s.dt_min = float(p.dt_min);
      s.dt_max = float(p.dt_max);
      const StateLayerShape& shape = state_pool_->config().layers[size_t(s.args[7].state_layer)];
      if (s.args[7].state_role != StateRole::kSsm || shape.ssm_elements != p.heads * p.head_dim * p.state)
        return fail(step, "args[7] must be an SSM state pool of {} x {} x {} (its layer's holds {})", p.heads,
                    p.head_dim, p.state, shape.ssm_elements);
      KILN_RETURN_IF_ERROR(checkWidth(step, s.args[0], p.heads * p.head_dim, "args[0] (x)"));
      KILN_RETURN_IF_ERROR(checkWidth(step, s.args[1], p.heads, "args[1] (dt)"));
      for (size_t i : {4u, 5u})
        KILN_RETURN_IF_ERROR(checkWidth(step, s.args[i], p.groups * p.state, fmt::format("args[{}]", i)));
      for (size_t i : {2u, 3u, 6u}) KILN_RETURN_IF_ERROR(checkWeight(step, s.args[i], {p.heads}, "per-head", true));
      KILN_RETURN_IF_ERROR(checkWidth(step, r0, p.heads * p.head_dim, "results[0]"));
      KILN_RETURN_IF_ERROR(noAlias());
      break;
    }
    case StepKind::kSsmGatedNorm: {
      const SsmGatedNormParams& p = step.as<SsmGatedNormParams>();
      s.width = p.features;
      s.group_size = p.group_size;
      s.epsilon = float(p.epsilon);
      for (size_t i : {0u, 1u}) KILN_RETURN_IF_ERROR(checkWidth(step, s.args[i], p.features, fmt::format("args[{}]", i)));
      KILN_RETURN_IF_ERROR(checkWeight(step, s.args[2], {p.features}, "norm", /*want_f32=*/true));
      KILN_RETURN_IF_ERROR(checkWidth(step, r0, p.features, "results[0]"));
      break;
    }
    case StepKind::kGatherLastTokens: {
      const int64_t hidden = step.as<GatherLastTokensParams>().hidden;
      s.width = hidden;
      KILN_RETURN_IF_ERROR(checkWidth(step, s.args[0], hidden, "args[0]"));
      KILN_RETURN_IF_ERROR(checkWidth(step, r0, hidden, "results[0]"));
      if (s.args[0].per_sequence || !r0.per_sequence)
        return fail(step, "expected token rows in and sequence rows out");
      KILN_RETURN_IF_ERROR(noAlias());
      break;
    }
  }
  (void)manifest_;
  return s;
}

}  // namespace

Result<std::unique_ptr<CpuExecutor>> CpuExecutor::create(const Manifest& manifest,
                                                         const WeightStore& weights,
                                                         const KvPoolConfig& kv,
                                                         int64_t max_tokens, int64_t state_slots) {
  const std::string& mpath = manifest.path;
  const Entry* entry = manifest.findEntry("forward");
  if (!entry) return makeError("{}: entries: missing entry 'forward'", mpath);
  if (manifest.activation_type != "f32")
    return makeError("{}: activation_type: the CPU executor runs f32 activations, got {}", mpath,
                     manifest.activation_type);
  if (manifest.world_size != 1)
    return makeError("{}: world_size: the CPU executor runs world_size 1, got {} (a multi-rank plan needs the "
                     "MPI/NCCL launcher of issue #26, not built yet)",
                     mpath, manifest.world_size);
  const KvCacheConfig& mk = manifest.kv_cache;
  KILN_RETURN_IF_ERROR(checkPoolMatchesManifest(kv, manifest));
  if (max_tokens <= 0 || max_tokens > (int64_t(1) << 24))
    return makeError("token budget {} is out of range [1, {}]", max_tokens, int64_t(1) << 24);
  if (entry->outputs.size() != 1 || entry->outputs[0].name != "logits")
    return makeError("{}: entries.forward.outputs: expected one output named 'logits'", mpath);

  auto pool = BlockPool::create(kv);
  if (!pool.ok()) return pool.error();

  std::unique_ptr<CpuExecutor> ex(new CpuExecutor());
  ex->pool_ = std::make_unique<BlockPool>(pool.take());
  ex->max_tokens_ = max_tokens;
  if (!manifest.state_cache.layers.empty()) {
    if (state_slots <= 0)
      return makeError("{}: state_cache: the plan has state-space layers; expected state slots > 0 (one per "
                       "sequence run at once), got {}",
                       mpath, state_slots);
    if (manifest.state_cache.conv_type != "f32")
      return makeError("{}: state_cache.conv_type: the CPU executor keeps f32 state, got {}", mpath,
                       manifest.state_cache.conv_type);
    auto states = StatePool::create(statePoolConfigFor(manifest, state_slots), /*host_storage=*/true);
    if (!states.ok()) return states.error();
    ex->state_pool_ = std::make_unique<StatePool>(states.take());
  }

  // One allocation: the planned arena, then the executor's scratch.
  const int64_t kd = int64_t(mk.kv_heads) * mk.head_dim;
  int64_t hidden = manifest.model.hidden_size;
  // The verify entry (kiln-compile --spec-tree) shares the arena: the two
  // never run at once.
  const Entry* verify = manifest.findEntry("verify");
  const Entry* draft = verify ? manifest.findEntry("draft") : nullptr;
  int64_t bytes_per_token = entry->bytes_per_token;
  for (const Entry* e : {entry, verify, draft}) {
    if (!e) continue;
    bytes_per_token = std::max(bytes_per_token, e->bytes_per_token);
    for (const Step& step : e->steps)
      if (step.kind == StepKind::kResidualRmsNorm)
        hidden = std::max(hidden, step.as<ResidualRmsNormParams>().hidden);
  }
  const int64_t planned = alignUp(bytes_per_token * max_tokens);
  const int64_t k_bytes = alignUp(kd * 4 * max_tokens);
  const int64_t sum_bytes = alignUp(hidden * 4 * max_tokens);
  const int64_t slot_bytes = alignUp(8 * max_tokens);
  ex->arena_bytes_ = planned + 2 * k_bytes + sum_bytes + slot_bytes;
  ex->arena_ = static_cast<float*>(std::aligned_alloc(kAlign, size_t(ex->arena_bytes_)));
  if (!ex->arena_)
    return makeError("cannot allocate the {}-byte arena for a budget of {} tokens",
                     ex->arena_bytes_, max_tokens);
  std::memset(ex->arena_, 0, size_t(ex->arena_bytes_));
  uint8_t* base = reinterpret_cast<uint8_t*>(ex->arena_);
  ex->scratch_k_ = reinterpret_cast<float*>(base + planned);
  ex->scratch_v_ = reinterpret_cast<float*>(base + planned + k_bytes);
  ex->scratch_sum_ = reinterpret_cast<float*>(base + planned + 2 * k_bytes);
  ex->scratch_slots_ = reinterpret_cast<int64_t*>(base + planned + 2 * k_bytes + sum_bytes);

  StepBinder binder(manifest, *entry, weights, *ex->pool_, base, max_tokens, ex->state_pool_.get());
  int64_t moe_floats = 0;
  for (const Step& step : entry->steps) {
    auto bound = binder.bind(step);
    if (!bound.ok()) return bound.error();
    if (step.kind == StepKind::kMoeRouter && bound->k > 0)
      moe_floats = std::max(moe_floats, max_tokens * bound->experts);
    if (step.kind == StepKind::kMoeFfn) {
      const ExpertWeights& w = bound->expert_weights;
      moe_floats = std::max(moe_floats, moeScratchFloats(max_tokens, bound->top_k, w.hidden, w.ffn));
    }
    if (step.kind == StepKind::kSsdScan) {
      SsdScanArgs a;
      a.rows = max_tokens;
      a.chunk_size = bound->chunk_size;
      ex->ssd_scratch_.resize(std::max(ex->ssd_scratch_.size(), size_t(ssdScratchFloats(a))));
    }
    ex->steps_.push_back(bound.take());
  }
  ex->moe_scratch_.resize(size_t(moe_floats));
  Step output_step;  // only for the error path
  output_step.path = mpath + ": entries.forward.outputs[0]";
  auto logits = binder.value(output_step, entry->outputs[0].value, "value");
  if (!logits.ok()) return logits.error();
  ex->logits_ = logits->data;
  ex->vocab_ = logits->width;
  ex->logits_per_sequence_ = logits->per_sequence;
  for (const BoundStep& s : ex->steps_)
    if (s.kind == StepKind::kGemm && s.results[0].data == ex->logits_ && s.args.size() >= 2) ex->head_step_ = &s;
  if (ex->head_step_) ex->hidden_size_ = ex->head_step_->k;
  if (verify) KILN_RETURN_IF_ERROR(ex->bindVerify(manifest, *verify, weights));
  if (draft) KILN_RETURN_IF_ERROR(ex->bindDraft(manifest, *draft, weights));
  return ex;
}

Status CpuExecutor::bindDraft(const Manifest& manifest, const Entry& entry, const WeightStore& weights) {
  const std::string where = manifest.path + ": entries.draft";
  if (entry.outputs.size() != 1 || entry.outputs[0].name != "logits")
    return makeError("{}.outputs: expected one output named 'logits'", where);
  StepBinder binder(manifest, entry, weights, *pool_, reinterpret_cast<uint8_t*>(arena_), max_tokens_);
  for (const Step& step : entry.steps) {
    auto bound = binder.bind(step);
    if (!bound.ok()) return bound.error();
    draft_steps_.push_back(bound.take());
  }
  Step output_step;
  output_step.path = where + ".outputs";
  auto v = binder.value(output_step, entry.outputs[0].value, "logits");
  if (!v.ok()) return v.error();
  if (v->integer || v->per_sequence || v->width != vocab_)
    return makeError("{}.outputs: logits must be f32 [N, {}] (a row per tree node)", where, vocab_);
  draft_logits_ = v->data;
  auto layers = manifest.options.find("spec_layerskip");
  draft_layers_ = layers == manifest.options.end() ? 0 : std::atoll(layers->second.c_str());
  if (draft_layers_ <= 0 || draft_layers_ >= manifest.model.num_layers)
    return makeError("{}: options.spec_layerskip is '{}', expected 1 to {} (the draft entry's layers)", manifest.path,
                     layers == manifest.options.end() ? "" : layers->second, manifest.model.num_layers - 1);
  return {};
}

Status CpuExecutor::checkTreeBatch(const BatchInputs& in, std::span<float> logits_out) const {
  const KvPoolConfig& pool = pool_->config();
  KILN_RETURN_IF_ERROR(checkBatchInputs(in, {max_tokens_, vocab_, pool.num_blocks, pool.page_size,
                                             /*logits_per_sequence=*/false},
                                        logits_out.size()));
  const int64_t b = int64_t(in.kv_lens.size());
  if (int64_t(in.base_positions.size()) != b)
    return makeError("base_positions has {} entries; expected one per sequence ({})", in.base_positions.size(), b);
  return checkTreeParents(in.parents, in.query_start, tree_nodes_);
}

Status CpuExecutor::draft(const BatchInputs& in, std::span<float> logits_out) {
  if (draft_layers_ == 0)
    return makeError("draft: the artifact has no draft entry (compile it with kiln-compile --spec-layerskip K)");
  if (Status checked = checkTreeBatch(in, logits_out); !checked.ok())
    return makeError("draft: {}", checked.error().message);
  const int64_t n = int64_t(in.tokens.size());
  const int64_t b = int64_t(in.kv_lens.size());
  for (int64_t t = 0; t < n; ++t) scratch_slots_[t] = in.slot_mapping[size_t(t)];
  for (const BoundStep& step : draft_steps_) {
    Status status = runStep(step, in, n, b);
    if (!status.ok())
      return makeError("{} ({}): {}", step.path, stepKindName(step.kind), status.error().message);
  }
  std::memcpy(logits_out.data(), draft_logits_, size_t(n * vocab_) * 4);
  return {};
}

Status CpuExecutor::bindVerify(const Manifest& manifest, const Entry& entry, const WeightStore& weights) {
  const std::string where = manifest.path + ": entries.verify";
  if (entry.outputs.size() != 3 || entry.outputs[0].name != "logits" || entry.outputs[1].name != "accepted" ||
      entry.outputs[2].name != "accepted_count")
    return makeError("{}.outputs: expected logits, accepted and accepted_count", where);
  StepBinder binder(manifest, entry, weights, *pool_, reinterpret_cast<uint8_t*>(arena_), max_tokens_);
  for (const Step& step : entry.steps) {
    auto bound = binder.bind(step);
    if (!bound.ok()) return bound.error();
    if (step.kind == StepKind::kTreeMask) tree_nodes_ = bound->results[0].width;
    verify_steps_.push_back(bound.take());
  }
  Step output_step;
  output_step.path = where + ".outputs";
  Operand outs[3];
  for (size_t i = 0; i < 3; ++i) {
    auto v = binder.value(output_step, entry.outputs[i].value, entry.outputs[i].name);
    if (!v.ok()) return v.error();
    outs[i] = *v;
  }
  if (outs[0].integer || outs[0].per_sequence || outs[0].width != vocab_)
    return makeError("{}.outputs: logits must be f32 [N, {}] (a row per tree node)", where, vocab_);
  if (!outs[1].integer || !outs[2].integer || tree_nodes_ <= 0)
    return makeError("{}: expected a tree_mask step and i32 accepted and accepted_count outputs", where);
  verify_logits_ = outs[0].data;
  for (const BoundStep& s : verify_steps_)
    if (s.kind == StepKind::kGemm && s.results[0].data == verify_logits_ && s.args.size() >= 2) verify_head_step_ = &s;
  verify_accepted_ = reinterpret_cast<int32_t*>(outs[1].data);
  verify_path_width_ = outs[1].width;
  verify_count_ = reinterpret_cast<int32_t*>(outs[2].data);
  return {};
}

Status CpuExecutor::verify(const BatchInputs& in, std::span<float> logits_out, std::span<int32_t> accepted_out,
                           std::span<int32_t> count_out) {
  if (tree_nodes_ == 0)
    return makeError("verify: the artifact has no verify entry (compile it with kiln-compile --spec-tree)");
  const KvPoolConfig& pool = pool_->config();
  KILN_RETURN_IF_ERROR(checkBatchInputs(in, {max_tokens_, vocab_, pool.num_blocks, pool.page_size,
                                             /*logits_per_sequence=*/false},
                                        logits_out.size()));
  const int64_t n = int64_t(in.tokens.size());
  const int64_t b = int64_t(in.kv_lens.size());
  if (int64_t(in.base_positions.size()) != b)
    return makeError("verify: base_positions has {} entries; expected one per sequence ({})",
                     in.base_positions.size(), b);
  KILN_RETURN_IF_ERROR(checkTreeParents(in.parents, in.query_start, tree_nodes_));
  if (int64_t(accepted_out.size()) < b * verify_path_width_ || int64_t(count_out.size()) < b)
    return makeError("verify: accepted holds {} and count {} entries; expected {} x {} and {}", accepted_out.size(),
                     count_out.size(), b, verify_path_width_, b);
  for (int64_t t = 0; t < n; ++t) scratch_slots_[t] = in.slot_mapping[size_t(t)];
  for (const BoundStep& step : verify_steps_) {
    Status status = runStep(step, in, n, b);
    if (!status.ok())
      return makeError("{} ({}): {}", step.path, stepKindName(step.kind), status.error().message);
  }
  std::memcpy(logits_out.data(), verify_logits_, size_t(n * vocab_) * 4);
  if (verify_head_step_) last_hidden_ = {verify_head_step_->args[0].data, size_t(n * hidden_size_)};
  std::memcpy(accepted_out.data(), verify_accepted_, size_t(b * verify_path_width_) * 4);
  std::memcpy(count_out.data(), verify_count_, size_t(b) * 4);
  return {};
}

Status CpuExecutor::checkBatch(const BatchInputs& in, std::span<float> logits_out) const {
  const KvPoolConfig& pool = pool_->config();
  return checkBatchInputs(in, {max_tokens_, vocab_, pool.num_blocks, pool.page_size,
                               logits_per_sequence_, state_pool_ ? state_pool_->numSlots() : 0},
                          logits_out.size());
}

void CpuExecutor::resetFreshStates(const BatchInputs& in) {
  if (!state_pool_) return;
  const StatePoolConfig& config = state_pool_->config();
  for (size_t b = 0; b + 1 < in.query_start.size(); ++b) {
    if (in.positions[size_t(in.query_start[b])] != 0) continue;
    const int32_t slot = in.state_slots[b];
    for (size_t l = 0; l < config.layers.size(); ++l) {
      const StateLayerShape& shape = config.layers[l];
      std::fill_n(state_pool_->conv(int64_t(l), slot), shape.conv_rows * shape.conv_channels, 0.0f);
      std::fill_n(state_pool_->ssm(int64_t(l), slot), shape.ssm_elements, 0.0f);
    }
  }
}

Status CpuExecutor::forward(const BatchInputs& in, std::span<float> logits_out) {
  KILN_RETURN_IF_ERROR(checkBatch(in, logits_out));
  resetFreshStates(in);
  const int64_t n = int64_t(in.tokens.size());
  const int64_t b = int64_t(in.kv_lens.size());
  for (int64_t t = 0; t < n; ++t) scratch_slots_[t] = in.slot_mapping[size_t(t)];
  for (size_t i = 0; i < steps_.size(); ++i) {
    const BoundStep& step = steps_[i];
    Status status = runStep(step, in, n, b);
    if (!status.ok())
      return makeError("{} ({}): {}", step.path, stepKindName(step.kind), status.error().message);
    if (observer_)
      for (size_t r = 0; r < step.results.size(); ++r) {
        const Operand& v = step.results[r];
        const int64_t rows = v.per_sequence ? b : n;
        observer_(i, step.kind, r, {v.data, size_t(rows * v.width)}, v.width);
      }
  }
  const int64_t rows = logits_per_sequence_ ? b : n;
  std::memcpy(logits_out.data(), logits_, size_t(rows * vocab_) * 4);
  if (head_step_) last_hidden_ = {head_step_->args[0].data, size_t(rows * hidden_size_)};
  return {};
}

Status CpuExecutor::lmHead(std::span<const float> hidden, int64_t rows, std::span<float> logits) {
  if (!head_step_) return makeError("lm head: the forward entry's logits come from no gemm step");
  if (int64_t(hidden.size()) < rows * hidden_size_ || int64_t(logits.size()) < rows * vocab_)
    return makeError("lm head: {} hidden and {} logits values for {} rows; expected {} x {} and {} x {}",
                     hidden.size(), logits.size(), rows, rows, hidden_size_, rows, vocab_);
  const BoundStep& s = *head_step_;
  const BoundWeight& w = *s.args[1].weight;
  const float* bias = s.args.size() == 3 ? reinterpret_cast<const float*>(s.args[2].weight->data) : nullptr;
  return linear(hidden.data(), rows, s.k, w.data, w.type, s.width, bias, logits.data());
}

namespace {

// Copies `width` floats of each of `rows` rows between row strides.
void copyRows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
              int64_t width) {
  for (int64_t r = 0; r < rows; ++r)
    std::memmove(dst + r * dst_stride, src + r * src_stride, size_t(width) * 4);
}

}  // namespace

PagedAttentionArgs CpuExecutor::pagedAttentionArgs(const BoundStep& s, const BatchInputs& in, int64_t n,
                                                   int64_t b) const {
  const KvPoolConfig& pc = pool_->config();
  PagedAttentionArgs args;
  args.q = s.args[0].data;
  args.out = s.results[0].data;
  args.num_tokens = n;
  args.num_seqs = int(b);
  args.num_heads = s.heads;
  args.query_start = inputData(in, s.args[4].input);
  args.kv_len = inputData(in, s.args[5].input);
  args.block_table = inputData(in, s.args[3].input);
  args.max_blocks_per_seq = in.max_blocks;
  args.k_pool = s.args[1].pool;
  args.v_pool = s.args[2].pool;
  args.k_scales = s.args[1].pool_scales;
  args.v_scales = s.args[2].pool_scales;
  args.pool = KvPoolShape{.num_blocks = pc.num_blocks, .page_size = pc.page_size, .kv_heads = pc.kv_heads,
                          .head_dim = pc.head_dim, .element = pc.element};
  args.scale = s.scale;
  args.sliding_window = s.sliding_window;
  if (s.args.size() == 7) {
    args.tree_ancestors = reinterpret_cast<const uint8_t*>(s.args[6].data);
    args.tree_stride = int(s.args[6].width);
  }
  return args;
}

Status CpuExecutor::runStep(const BoundStep& s, const BatchInputs& in, int64_t n, int64_t b) {
  auto rowsOf = [&](const Operand& v) { return v.per_sequence ? b : n; };
  static const Operand kNoResult;  // kv_append writes the pools alone
  const Operand& out = s.results.empty() ? kNoResult : s.results[0];
  switch (s.kind) {
    case StepKind::kAllReduce:
    case StepKind::kSend:
    case StepKind::kRecv:
      return makeError("{}: {} exchanges activations between ranks; no backend runs it yet (issue #26)", s.path,
                       stepKindName(s.kind));
    case StepKind::kEmbedding: {
      const BoundWeight& table = *s.args[1].weight;
      KILN_RETURN_IF_ERROR(embed(inputData(in, s.args[0].input), n, table.data, table.type, s.k, s.width,
                                 out.data));
      if (s.embed_scale != 1.0f)
        for (int64_t i = 0; i < n * s.width; ++i) out.data[i] *= s.embed_scale;
      return {};
    }
    case StepKind::kRmsNorm: {
      return rmsNormResidual(s.args[0].data, nullptr,
                             reinterpret_cast<const float*>(s.args[1].weight->data), s.epsilon,
                             rowsOf(s.args[0]), s.width, out.data);
    }
    case StepKind::kResidualRmsNorm: {
      const int64_t rows = rowsOf(s.args[0]);
      float* sum = s.writes_sum ? s.results[0].data : scratch_sum_;
      add(s.args[0].data, s.args[1].data, sum, rows * s.width);
      return rmsNormResidual(sum, nullptr, reinterpret_cast<const float*>(s.args[2].weight->data),
                             s.epsilon, rows, s.width, s.results.back().data);
    }
    case StepKind::kGemm: {
      const BoundWeight& w = *s.args[1].weight;
      const float* bias =
          s.args.size() == 3 ? reinterpret_cast<const float*>(s.args[2].weight->data) : nullptr;
      if (w.sparse24)
        return sparse24Linear(s.args[0].data, rowsOf(s.args[0]), s.k, w.data, w.type,
                              w.data + w.sparse_meta_offset, s.width, bias, out.data);
      return linear(s.args[0].data, rowsOf(s.args[0]), s.k, w.data, w.type, s.width, bias,
                    out.data);
    }
    case StepKind::kRopeKvAppend: {
      const int64_t qd = int64_t(s.heads) * s.head_dim, kd = int64_t(s.kv_heads) * s.head_dim;
      const size_t pos_arg = s.merged ? 1 : 3;
      const Operand& pos = s.args[pos_arg];
      const int32_t* positions = pos.kind == StepArg::Kind::kValue ? reinterpret_cast<const int32_t*>(pos.data)
                                                                   : inputData(in, pos.input);
      const Operand& k_pool = s.args[pos_arg + 2];
      const Operand& v_pool = s.args[pos_arg + 3];
      const float* v_src;
      if (s.merged) {
        const float* qkv = s.args[0].data;
        const int64_t stride = qd + 2 * kd;
        // k and v go to scratch first: q's copy may overwrite qkv in place.
        copyRows(qkv + qd, stride, scratch_k_, kd, n, kd);
        copyRows(qkv + qd + kd, stride, scratch_v_, kd, n, kd);
        copyRows(qkv, stride, out.data, qd, n, qd);
        v_src = scratch_v_;
      } else {
        copyRows(s.args[1].data, kd, scratch_k_, kd, n, kd);
        if (out.data != s.args[0].data) copyRows(s.args[0].data, qd, out.data, qd, n, qd);
        v_src = s.args[2].data;
      }
      if (s.qk_norm) {  // each head of q and k normalized over its head_dim, before the rotation
        const size_t norms = s.merged ? 5 : 7;
        KILN_RETURN_IF_ERROR(rmsNormResidual(out.data, nullptr,
                                             reinterpret_cast<const float*>(s.args[norms].weight->data), s.epsilon,
                                             n * s.heads, s.head_dim, out.data));
        KILN_RETURN_IF_ERROR(rmsNormResidual(scratch_k_, nullptr,
                                             reinterpret_cast<const float*>(s.args[norms + 1].weight->data),
                                             s.epsilon, n * s.kv_heads, s.head_dim, scratch_k_));
      }
      KILN_RETURN_IF_ERROR(applyRope(out.data, n, s.heads, s.head_dim, positions, s.rope));
      KILN_RETURN_IF_ERROR(applyRope(scratch_k_, n, s.kv_heads, s.head_dim, positions, s.rope));
      const KvPoolConfig& pc = pool_->config();
      KvPoolShape shape{.num_blocks = pc.num_blocks, .page_size = pc.page_size,
                        .kv_heads = pc.kv_heads, .head_dim = pc.head_dim, .element = pc.element};
      return appendKvPaged(scratch_k_, v_src, n, scratch_slots_, shape, k_pool.pool, v_pool.pool,
                           k_pool.pool_scales, v_pool.pool_scales);
    }
    case StepKind::kPagedAttention:
      return pagedAttention(pagedAttentionArgs(s, in, n, b));
    case StepKind::kSiluMul: {
      const int64_t rows = rowsOf(s.args[0]);
      if (s.gelu_tanh && s.merged)
        return geluTanhMulSplit(s.args[0].data, s.args[0].data + s.width, 2 * s.width, rows, s.width, out.data);
      if (s.gelu_tanh) return geluTanhMulSplit(s.args[0].data, s.args[1].data, s.width, rows, s.width, out.data);
      if (s.merged) return siluMul(s.args[0].data, rows, s.width, out.data);
      return siluMulSplit(s.args[0].data, s.args[1].data, s.width, rows, s.width, out.data);
    }
    case StepKind::kAdd: {
      add(s.args[0].data, s.args[1].data, out.data, rowsOf(s.args[0]) * s.width);
      return {};
    }
    case StepKind::kMul: {
      const int64_t count = rowsOf(s.args[0]) * s.width;
      for (int64_t i = 0; i < count; ++i) out.data[i] = s.args[0].data[i] * s.args[1].data[i];
      return {};
    }
    case StepKind::kSilu: {
      silu(s.args[0].data, out.data, rowsOf(s.args[0]) * s.width);
      return {};
    }
    case StepKind::kReluSquared: {
      const int64_t count = rowsOf(s.args[0]) * s.width;
      for (int64_t i = 0; i < count; ++i) {
        const float r = std::max(s.args[0].data[i], 0.0f);
        out.data[i] = r * r;
      }
      return {};
    }
    case StepKind::kKvAppend: {
      const KvPoolConfig& pc = pool_->config();
      KvPoolShape shape{.num_blocks = pc.num_blocks, .page_size = pc.page_size,
                        .kv_heads = pc.kv_heads, .head_dim = pc.head_dim, .element = pc.element};
      return appendKvPaged(s.args[0].data, s.args[1].data, n, scratch_slots_, shape, s.args[3].pool, s.args[4].pool);
    }
    case StepKind::kSplit: {
      const int64_t rows = rowsOf(s.args[0]);
      int64_t column = 0;
      for (size_t i = 0; i < s.results.size(); ++i) {
        copyRows(s.args[0].data + column, s.args[0].width, s.results[i].data, s.sizes[i], rows,
                 s.sizes[i]);
        column += s.sizes[i];
      }
      return {};
    }
    case StepKind::kTreePositions: {
      treePositions(in.parents, in.base_positions, in.query_start, reinterpret_cast<int32_t*>(out.data));
      return {};
    }
    case StepKind::kTreeMask: {
      treeAncestorMask(in.parents, in.query_start, out.width, reinterpret_cast<uint8_t*>(out.data));
      return {};
    }
    case StepKind::kAccept: {
      acceptGreedy({s.args[0].data, size_t(n * s.args[0].width)}, s.args[0].width, in.tokens, in.parents,
                   in.query_start, s.results[0].width, reinterpret_cast<int32_t*>(s.results[0].data),
                   reinterpret_cast<int32_t*>(s.results[1].data));
      return {};
    }
    case StepKind::kMoeRouter: {
      const int64_t rows = rowsOf(s.args[0]);
      const float* logits = s.args[0].data;
      if (s.k > 0) {  // the router GEMM, fused
        const BoundWeight& w = *s.args[1].weight;
        KILN_RETURN_IF_ERROR(linear(s.args[0].data, rows, s.k, w.data, w.type, s.experts, nullptr,
                                    moe_scratch_.data()));
        logits = moe_scratch_.data();
      }
      moeRoute(logits, rows, s.experts, s.top_k, s.normalize, s.results[0].data,
               reinterpret_cast<int32_t*>(s.results[1].data));
      return {};
    }
    case StepKind::kMoeFfn: {
      return moeExperts(s.args[0].data, rowsOf(s.args[0]), s.args[1].data,
                        reinterpret_cast<const int32_t*>(s.args[2].data), s.top_k, s.expert_weights,
                        moe_scratch_, out.data);
    }
    case StepKind::kSsmConv1d: {
      const int32_t* query_start = inputData(in, s.args[3].input);
      const int32_t* slots = inputData(in, s.args[4].input);
      const float* weight = reinterpret_cast<const float*>(s.args[2].weight->data);
      const float* bias = s.args.size() == 6 ? reinterpret_cast<const float*>(s.args[5].weight->data) : nullptr;
      for (int64_t seq = 0; seq < b; ++seq) {
        const int64_t begin = query_start[seq], rows = query_start[seq + 1] - begin;
        causalConv1d(s.args[0].data + begin * s.args[0].width, rows, s.width, s.args[0].width, weight, s.conv_width,
                     bias, s.silu, state_pool_->conv(s.args[1].state_layer, slots[seq]), out.data + begin * out.width,
                     out.width);
      }
      return {};
    }
    case StepKind::kSelectiveScan: {
      const int32_t* query_start = inputData(in, s.args[7].input);
      const int32_t* slots = inputData(in, s.args[8].input);
      for (int64_t seq = 0; seq < b; ++seq) {
        const int64_t begin = query_start[seq];
        SelectiveScanArgs a;
        a.x = s.args[0].data + begin * s.args[0].width;
        a.dt = s.args[1].data + begin * s.args[1].width;
        a.b = s.args[3].data + begin * s.args[3].width;
        a.c = s.args[4].data + begin * s.args[4].width;
        a.a_log = reinterpret_cast<const float*>(s.args[2].weight->data);
        a.d = reinterpret_cast<const float*>(s.args[5].weight->data);
        a.rows = query_start[seq + 1] - begin;
        a.channels = s.width;
        a.state_size = s.state_size;
        a.x_stride = s.args[0].width;
        a.dt_stride = s.args[1].width;
        a.bc_stride = s.args[3].width;
        selectiveScan(a, state_pool_->ssm(s.args[6].state_layer, slots[seq]), out.data + begin * out.width);
      }
      return {};
    }
    case StepKind::kSsdScan: {
      const int32_t* query_start = inputData(in, s.args[8].input);
      const int32_t* slots = inputData(in, s.args[9].input);
      for (int64_t seq = 0; seq < b; ++seq) {
        const int64_t begin = query_start[seq];
        SsdScanArgs a;
        a.x = s.args[0].data + begin * s.args[0].width;
        a.dt = s.args[1].data + begin * s.args[1].width;
        a.b = s.args[4].data + begin * s.args[4].width;
        a.c = s.args[5].data + begin * s.args[5].width;
        a.dt_bias = reinterpret_cast<const float*>(s.args[2].weight->data);
        a.a_log = reinterpret_cast<const float*>(s.args[3].weight->data);
        a.d = reinterpret_cast<const float*>(s.args[6].weight->data);
        a.rows = query_start[seq + 1] - begin;
        a.heads = s.heads;
        a.head_dim = s.head_dim;
        a.groups = s.groups;
        a.state_size = s.state_size;
        a.x_stride = s.args[0].width;
        a.dt_stride = s.args[1].width;
        a.bc_stride = s.args[4].width;
        a.chunk_size = s.chunk_size;
        a.dt_min = s.dt_min;
        a.dt_max = s.dt_max;
        ssdScan(a, state_pool_->ssm(s.args[7].state_layer, slots[seq]), out.data + begin * out.width,
                ssd_scratch_.data());
      }
      return {};
    }
    case StepKind::kSsmGatedNorm: {
      gatedRmsNorm(s.args[0].data, s.args[0].width, s.args[1].data, s.args[1].width,
                   reinterpret_cast<const float*>(s.args[2].weight->data), rowsOf(s.args[0]), s.width, s.group_size,
                   s.epsilon, out.data);
      return {};
    }
    case StepKind::kGatherLastTokens: {
      const int32_t* query_start = inputData(in, s.args[1].input);
      for (int64_t seq = 0; seq < b; ++seq)
        std::memcpy(out.data + seq * s.width, s.args[0].data + (query_start[seq + 1] - 1) * s.width,
                    size_t(s.width) * 4);
      return {};
    }
  }
  return makeError("unknown step kind");
}

}  // namespace kiln::cpu
