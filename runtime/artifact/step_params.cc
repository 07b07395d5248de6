#include "runtime/artifact/step_params.h"

#include <climits>
#include <cmath>
#include <set>
#include <type_traits>

#include "runtime/artifact/element_types.h"
#include "runtime/artifact/plan_keys.h"

namespace kiln {

//===----------------------------------------------------------------------===//
// Step kinds
//===----------------------------------------------------------------------===//

namespace {

struct KindName {
  StepKind kind;
  std::string_view name;
};
constexpr KindName kKindNames[] = {
    {StepKind::kEmbedding, "embedding"},
    {StepKind::kRmsNorm, "rms_norm"},
    {StepKind::kResidualRmsNorm, "residual_rms_norm"},
    {StepKind::kGemm, "gemm"},
    {StepKind::kRopeKvAppend, "rope_kv_append"},
    {StepKind::kPagedAttention, "paged_attention"},
    {StepKind::kSiluMul, "silu_mul"},
    {StepKind::kAdd, "add"},
    {StepKind::kMul, "mul"},
    {StepKind::kSilu, "silu"},
    {StepKind::kSplit, "split"},
    {StepKind::kGatherLastTokens, "gather_last_tokens"},
    {StepKind::kMoeRouter, "moe_router"},
    {StepKind::kMoeFfn, "moe_ffn"},
    {StepKind::kTreePositions, "tree_positions"},
    {StepKind::kTreeMask, "tree_mask"},
    {StepKind::kAccept, "accept"},
    {StepKind::kSsmConv1d, "ssm_conv1d"},
    {StepKind::kSelectiveScan, "selective_scan"},
    {StepKind::kSsdScan, "ssd_scan"},
    {StepKind::kSsmGatedNorm, "ssm_gated_norm"},
    {StepKind::kKvAppend, "kv_append"},
    {StepKind::kReluSquared, "relu_squared"},
    {StepKind::kAllReduce, "all_reduce"},
    {StepKind::kSend, "send"},
    {StepKind::kRecv, "recv"},
};

}  // namespace

std::string_view stepKindName(StepKind kind) {
  for (const KindName& k : kKindNames)
    if (k.kind == kind) return k.name;
  return "?";
}

std::optional<StepKind> parseStepKind(std::string_view name) {
  for (const KindName& k : kKindNames)
    if (k.name == name) return k.kind;
  return std::nullopt;
}

std::string supportedStepKinds() {
  std::string out;
  for (const KindName& k : kKindNames) {
    if (!out.empty()) out += ", ";
    out += k.name;
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Field tables: each kind's params, their names and whether they must be
// present. One table per struct serves parsing, writing and the list of
// names an unknown param's error offers.
//===----------------------------------------------------------------------===//

namespace {

namespace key = plan_key;

// kRequired: read must find it, always written. kDefaulted: absent reads as
// the struct's default, always written. kOptional: absent reads as the
// default, written only when it differs from it.
enum class Presence { kRequired, kDefaulted, kOptional };
constexpr Presence R = Presence::kRequired, D = Presence::kDefaulted, O = Presence::kOptional;

// What a field's value must be, checked for every kind alike (checkRule);
// what relates two fields is each kind's checkKind.
enum class Rule {
  kAny,
  kPositive,        // a size (each of a list's)
  kPositiveNumber,  // finite and > 0
  kElementType,     // a weight, table or pool type: GGUF/safetensors or kiln's schemes
  kActivationType,  // f32, bf16 or f16; empty: the plan's activation type
};

template <class P, class V>
void visitAttentionHeads(P& a, V&& v) {
  v(key::kHeads, a.heads, R, Rule::kPositive);
  v(key::kKvHeads, a.kv_heads, R, Rule::kPositive);
  v(key::kHeadDim, a.head_dim, R, Rule::kPositive);
  v(key::kPageSize, a.page_size, R, Rule::kPositive);
  v(key::kKvType, a.kv_type, R, Rule::kElementType);
}

// `P` is a params struct or its const; `v(name, member, presence, rule)`.
template <class P, class V>
void visitFields(P& p, V&& v) {
  using S = std::remove_const_t<P>;
  if constexpr (std::is_same_v<S, EmbeddingParams>) {
    v(key::kHidden, p.hidden, R, Rule::kPositive);
    v(key::kTableType, p.table_type, R, Rule::kElementType);
    v(key::kScale, p.scale, O, Rule::kPositiveNumber);
    v(key::kOutType, p.out_type, O, Rule::kActivationType);
  } else if constexpr (std::is_same_v<S, RmsNormParams>) {
    v(key::kHidden, p.hidden, R, Rule::kPositive);
    v(key::kEpsilon, p.epsilon, R, Rule::kPositiveNumber);
    v(key::kWeightType, p.weight_type, O, Rule::kActivationType);
    v(key::kXType, p.x_type, O, Rule::kActivationType);
    v(key::kOutType, p.out_type, O, Rule::kActivationType);
  } else if constexpr (std::is_same_v<S, ResidualRmsNormParams>) {
    v(key::kHidden, p.hidden, R, Rule::kPositive);
    v(key::kEpsilon, p.epsilon, R, Rule::kPositiveNumber);
    v(key::kWritesSum, p.writes_sum, R, Rule::kAny);
    v(key::kWeightType, p.weight_type, O, Rule::kActivationType);
    v(key::kXType, p.x_type, O, Rule::kActivationType);
    v(key::kResidualType, p.residual_type, O, Rule::kActivationType);
    v(key::kSumType, p.sum_type, O, Rule::kActivationType);
    v(key::kOutType, p.out_type, O, Rule::kActivationType);
  } else if constexpr (std::is_same_v<S, GemmParams>) {
    v(key::kN, p.n, R, Rule::kPositive);
    v(key::kK, p.k, R, Rule::kPositive);
    v(key::kWeightType, p.weight_type, R, Rule::kElementType);
    v(key::kBias, p.bias, R, Rule::kAny);
    v(key::kScales, p.scales, D, Rule::kAny);
    v(key::kGroup, p.group, O, Rule::kAny);
    v(key::kRole, p.role, O, Rule::kAny);
  } else if constexpr (std::is_same_v<S, RopeKvAppendParams>) {
    visitAttentionHeads(p.attn, v);
    v(key::kMergedQkv, p.merged_qkv, R, Rule::kAny);
    v(key::kRopeTheta, p.rope_theta, R, Rule::kPositiveNumber);
    v(key::kRopeStyle, p.rope_style, R, Rule::kAny);
    v(key::kRopeScaling, p.rope_scaling, R, Rule::kAny);
    v(key::kRopeFactor, p.rope_factor, R, Rule::kAny);
    v(key::kRopeLowFreqFactor, p.rope_low_freq_factor, R, Rule::kAny);
    v(key::kRopeHighFreqFactor, p.rope_high_freq_factor, R, Rule::kAny);
    v(key::kRopeOriginalMaxPosition, p.rope_original_max_position, R, Rule::kAny);
    v(key::kQkNorm, p.qk_norm, O, Rule::kAny);
    v(key::kQkNormEpsilon, p.qk_norm_epsilon, O, Rule::kAny);
    v(key::kXType, p.x_type, O, Rule::kActivationType);
    v(key::kOutType, p.out_type, O, Rule::kActivationType);
  } else if constexpr (std::is_same_v<S, PagedAttentionParams>) {
    visitAttentionHeads(p.attn, v);
    v(key::kScale, p.scale, R, Rule::kPositiveNumber);
    v(key::kTreeMask, p.tree_mask, D, Rule::kAny);
    v(key::kSlidingWindow, p.sliding_window, O, Rule::kAny);
    v(key::kQType, p.q_type, O, Rule::kActivationType);
    v(key::kOutType, p.out_type, O, Rule::kActivationType);
  } else if constexpr (std::is_same_v<S, SiluMulParams>) {
    v(key::kFfn, p.ffn, R, Rule::kPositive);
    v(key::kMergedGateUp, p.merged_gate_up, R, Rule::kAny);
    v(key::kActivation, p.activation, O, Rule::kAny);
    v(key::kXType, p.x_type, O, Rule::kActivationType);
    v(key::kOutType, p.out_type, O, Rule::kActivationType);
  } else if constexpr (std::is_same_v<S, ElementwiseParams>) {
    v(key::kWidth, p.width, R, Rule::kPositive);
    v(key::kAType, p.a_type, O, Rule::kActivationType);
    v(key::kBType, p.b_type, O, Rule::kActivationType);
    v(key::kOutType, p.out_type, O, Rule::kActivationType);
  } else if constexpr (std::is_same_v<S, SplitParams>) {
    v(key::kAxis, p.axis, R, Rule::kAny);
    v(key::kSizes, p.sizes, R, Rule::kPositive);
  } else if constexpr (std::is_same_v<S, GatherLastTokensParams>) {
    v(key::kHidden, p.hidden, R, Rule::kPositive);
    v(key::kType, p.type, O, Rule::kActivationType);
  } else if constexpr (std::is_same_v<S, MoeRouterParams>) {
    v(key::kExperts, p.experts, R, Rule::kPositive);
    v(key::kTopK, p.top_k, R, Rule::kPositive);
    v(key::kNormalize, p.normalize, R, Rule::kAny);
    v(key::kHidden, p.hidden, O, Rule::kAny);
    v(key::kWeightType, p.weight_type, O, Rule::kAny);
  } else if constexpr (std::is_same_v<S, MoeFfnParams>) {
    v(key::kHidden, p.hidden, R, Rule::kPositive);
    v(key::kFfn, p.ffn, R, Rule::kPositive);
    v(key::kExperts, p.experts, R, Rule::kPositive);
    v(key::kTopK, p.top_k, R, Rule::kPositive);
    v(key::kWeightType, p.weight_type, R, Rule::kElementType);
  } else if constexpr (std::is_same_v<S, TreePositionsParams> || std::is_same_v<S, TreeMaskParams>) {
  } else if constexpr (std::is_same_v<S, AcceptParams>) {
    v(key::kMode, p.mode, R, Rule::kAny);
  } else if constexpr (std::is_same_v<S, AllReduceParams>) {
    v(key::kHidden, p.hidden, R, Rule::kPositive);
    v(key::kGroupSize, p.group_size, R, Rule::kPositive);
    v(key::kType, p.type, O, Rule::kActivationType);
  } else if constexpr (std::is_same_v<S, HandoverParams>) {
    v(key::kHidden, p.hidden, R, Rule::kPositive);
    v(key::kPeer, p.peer, R, Rule::kAny);
    v(key::kType, p.type, O, Rule::kActivationType);
  } else if constexpr (std::is_same_v<S, SsmConv1dParams>) {
    v(key::kChannels, p.channels, R, Rule::kPositive);
    v(key::kWidth, p.width, R, Rule::kPositive);
    v(key::kSilu, p.silu, R, Rule::kAny);
    v(key::kBias, p.bias, D, Rule::kAny);
  } else if constexpr (std::is_same_v<S, SelectiveScanParams>) {
    v(key::kChannels, p.channels, R, Rule::kPositive);
    v(key::kState, p.state, R, Rule::kPositive);
  } else if constexpr (std::is_same_v<S, SsdScanParams>) {
    v(key::kHeads, p.heads, R, Rule::kPositive);
    v(key::kHeadDim, p.head_dim, R, Rule::kPositive);
    v(key::kGroups, p.groups, R, Rule::kPositive);
    v(key::kState, p.state, R, Rule::kPositive);
    v(key::kChunkSize, p.chunk_size, R, Rule::kPositive);
    v(key::kDtMin, p.dt_min, D, Rule::kAny);
    v(key::kDtMax, p.dt_max, O, Rule::kAny);
  } else if constexpr (std::is_same_v<S, KvAppendParams>) {
    v(key::kKvHeads, p.kv_heads, R, Rule::kPositive);
    v(key::kHeadDim, p.head_dim, R, Rule::kPositive);
    v(key::kPageSize, p.page_size, R, Rule::kPositive);
    v(key::kKvType, p.kv_type, R, Rule::kElementType);
  } else if constexpr (std::is_same_v<S, SsmGatedNormParams>) {
    v(key::kFeatures, p.features, R, Rule::kPositive);
    v(key::kGroupSize, p.group_size, R, Rule::kPositive);
    v(key::kEpsilon, p.epsilon, R, Rule::kPositiveNumber);
  } else {
    static_assert(!sizeof(S), "a params struct without a field table");
  }
}

template <class T>
constexpr std::string_view expectedName() {
  if constexpr (std::is_same_v<T, int64_t>) return "an integer";
  else if constexpr (std::is_same_v<T, double>) return "a number";
  else if constexpr (std::is_same_v<T, bool>) return "a boolean";
  else if constexpr (std::is_same_v<T, std::string>) return "a string";
  else return "an integer list";
}

std::string_view valueName(const ParamValue& value) {
  switch (value.index()) {
    case 0: return "an integer";
    case 1: return "a number";
    case 2: return "a boolean";
    case 3: return "a string";
    default: return "an integer list";
  }
}

// Reads `values` into a params struct by its field table.
template <class S>
Result<S> readFields(const ParamMap& values, const std::string& path, StepKind kind) {
  S out;
  std::optional<Error> error;
  std::set<std::string_view> known;
  visitFields(out, [&](const char* name, auto& member, Presence presence, Rule) {
    using T = std::remove_reference_t<decltype(member)>;
    known.insert(name);
    if (error) return;
    auto it = values.find(std::string_view(name));
    if (it == values.end()) {
      if (presence == Presence::kRequired)
        error = makeError("{}: missing param '{}' (expected {})", path, name, expectedName<T>());
      return;
    }
    if (const T* v = std::get_if<T>(&it->second)) {
      member = *v;
      return;
    }
    if constexpr (std::is_same_v<T, double>) {
      if (const int64_t* i = std::get_if<int64_t>(&it->second)) {  // 10000.0 written as 10000
        member = double(*i);
        return;
      }
    }
    error = makeError("{}.{}: expected {}, got {}", path, name, expectedName<T>(), valueName(it->second));
  });
  if (error) return *error;
  for (const auto& [name, value] : values) {
    if (known.count(name)) continue;
    std::string names;
    for (std::string_view k : known) names += (names.empty() ? "" : ", ") + std::string(k);
    return makeError("{}.{}: {} takes no param '{}' (its params: {})", path, name, stepKindName(kind), name, names);
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Range checks: what every backend relies on, checked once
//===----------------------------------------------------------------------===//

class RangeCheck {
 public:
  explicit RangeCheck(const std::string& path) : path_(path) {}

  template <class T>
  Status rule(const char* name, const T& value, Rule rule) const {
    if constexpr (std::is_same_v<T, int64_t>) {
      if (rule == Rule::kPositive && (value <= 0 || value > (int64_t(1) << 40)))
        return fail(name, "expected a positive size, got {}", value);
    } else if constexpr (std::is_same_v<T, double>) {
      if (rule == Rule::kPositiveNumber && (!std::isfinite(value) || !(value > 0)))
        return fail(name, "expected a positive finite number, got {}", value);
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (rule == Rule::kActivationType && !value.empty() && value != "f32" && value != "bf16" && value != "f16")
        return fail(name, "expected f32, bf16 or f16, got '{}'", value);
      if (rule == Rule::kElementType && !isPlanElementType(value))
        return fail(name, "unknown element type '{}'", value);
    } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
      if (rule == Rule::kPositive && value.empty()) return fail(name, "expected at least one size");
      for (int64_t v : value) KILN_RETURN_IF_ERROR(this->rule(name, v, rule));
    }
    return {};
  }
  Status oneOf(const char* name, const std::string& value, std::initializer_list<std::string_view> accepted) const {
    std::string list;
    for (std::string_view a : accepted) {
      if (a == value) return {};
      list += (list.empty() ? "" : ", ") + std::string(a);
    }
    return fail(name, "expected one of {}, got '{}'", list, value);
  }
  template <typename... Args>
  Error fail(const char* name, fmt::format_string<Args...> format, Args&&... args) const {
    return makeError("{}.{}: {}", path_, name, fmt::format(format, std::forward<Args>(args)...));
  }

 private:
  const std::string& path_;
};

Status checkHeads(const RangeCheck& c, const AttentionHeads& a) {
  if (a.heads % a.kv_heads != 0)
    return c.fail(key::kHeads, "{} is not a multiple of kv_heads {}", a.heads, a.kv_heads);
  return {};
}

// What relates a kind's fields, after each field's own rule.
template <class S>
Status checkKind(const RangeCheck&, const S&) {
  return {};
}

Status checkKind(const RangeCheck& c, const GemmParams& p) {
  // kiln's own schemes (xfmr-insert-quantization) keep their scales apart;
  // float weights have none and GGUF blocks carry theirs; 2:4 sparse weights
  // (sp24 float, int8sp24, int4sp24) need whole 64-column spans.
  const std::string& t = p.weight_type;
  const bool kiln_scheme = t == "int8" || t == "int4" || t == "fp8e4m3" || t == "int8sp24" || t == "int4sp24";
  const bool sparse24 = t == "sp24" || t == "int8sp24" || t == "int4sp24";
  if (sparse24 && p.k % 64 != 0)
    return c.fail(key::kWeightType, "is {} with k {}: 2:4 sparse weights need k a multiple of 64", t, p.k);
  if (p.scales != kiln_scheme)
    return c.fail(key::kScales, "weight_type {} {} a scales operand", p.weight_type,
                  p.scales ? "does not take" : "needs");
  if (p.group != 0 && (!kiln_scheme || p.group < 0 || p.k % p.group != 0))
    return c.fail(key::kGroup, "is {} with weight_type {} and k {}: expected a divisor of k, for kiln's schemes only",
                  p.group, p.weight_type, p.k);
  if (!p.role.empty()) return c.oneOf(key::kRole, p.role, {"logits"});
  return {};
}

Status checkKind(const RangeCheck& c, const RopeKvAppendParams& p) {
  KILN_RETURN_IF_ERROR(checkHeads(c, p.attn));
  if (p.attn.head_dim % 2 != 0) return c.fail(key::kHeadDim, "expected an even size (rotated pairs), got {}", p.attn.head_dim);
  KILN_RETURN_IF_ERROR(c.oneOf(key::kRopeStyle, p.rope_style, {"half", "interleaved"}));
  KILN_RETURN_IF_ERROR(c.oneOf(key::kRopeScaling, p.rope_scaling, {"none", "linear", "llama3"}));
  if (p.rope_scaling != "none") KILN_RETURN_IF_ERROR(c.rule(key::kRopeFactor, p.rope_factor, Rule::kPositiveNumber));
  if (p.rope_scaling == "llama3" &&
      (!(p.rope_low_freq_factor > 0) || !(p.rope_high_freq_factor > p.rope_low_freq_factor) ||
       p.rope_original_max_position <= 0))
    return c.fail(key::kRopeScaling,
                  "llama3 scaling with low_freq_factor {}, high_freq_factor {}, original_max_position {}: "
                  "expected 0 < low < high and a positive position",
                  p.rope_low_freq_factor, p.rope_high_freq_factor, p.rope_original_max_position);
  if (p.qk_norm) KILN_RETURN_IF_ERROR(c.rule(key::kQkNormEpsilon, p.qk_norm_epsilon, Rule::kPositiveNumber));
  else if (p.qk_norm_epsilon != 0)
    return c.fail(key::kQkNormEpsilon, "is {} without qk_norm", p.qk_norm_epsilon);
  return {};
}

Status checkKind(const RangeCheck& c, const PagedAttentionParams& p) {
  KILN_RETURN_IF_ERROR(checkHeads(c, p.attn));
  if (p.sliding_window < 0 || p.sliding_window > INT32_MAX)
    return c.fail(key::kSlidingWindow, "expected a positive number of keys (absent: no window), got {}",
                  p.sliding_window);
  if (p.sliding_window > 0 && p.tree_mask)
    return c.fail(key::kSlidingWindow, "{} with tree_mask: windowed speculative verify is not supported",
                  p.sliding_window);
  return {};
}

Status checkKind(const RangeCheck& c, const MoeRouterParams& p) {
  if (p.top_k > p.experts) return c.fail(key::kTopK, "is {}, more than the {} experts", p.top_k, p.experts);
  if (p.hidden < 0) return c.fail(key::kHidden, "expected a positive size (absent: logits given), got {}", p.hidden);
  if ((p.hidden > 0) != !p.weight_type.empty())
    return c.fail(key::kWeightType, "is '{}' with hidden {}: the router weight's type comes with it", p.weight_type,
                  p.hidden);
  if (!p.weight_type.empty()) return c.rule(key::kWeightType, p.weight_type, Rule::kElementType);
  return {};
}

Status checkKind(const RangeCheck& c, const MoeFfnParams& p) {
  if (p.top_k > p.experts) return c.fail(key::kTopK, "is {}, more than the {} experts", p.top_k, p.experts);
  return {};
}

Status checkKind(const RangeCheck& c, const SsmConv1dParams& p) {
  if (p.width < 2 || p.width > 8) return c.fail(key::kWidth, "expected 2 to 8 taps, got {}", p.width);
  return {};
}

Status checkKind(const RangeCheck& c, const SsdScanParams& p) {
  if (p.heads % p.groups != 0) return c.fail(key::kGroups, "{} does not divide the {} heads", p.groups, p.heads);
  if (!(p.dt_min >= 0) || !(p.dt_max > p.dt_min))
    return c.fail(key::kDtMax, "the limits are [{}, {}], expected 0 <= dt_min < dt_max", p.dt_min, p.dt_max);
  return {};
}

Status checkKind(const RangeCheck& c, const SsmGatedNormParams& p) {
  if (p.features % p.group_size != 0)
    return c.fail(key::kGroupSize, "{} does not divide the {} features", p.group_size, p.features);
  return {};
}

Status checkKind(const RangeCheck& c, const AcceptParams& p) {
  return c.oneOf(key::kMode, p.mode, {"greedy", "rejection"});
}

template <class S>
Status checkRanges(const RangeCheck& c, const S& p) {
  Status status;
  visitFields(p, [&](const char* name, const auto& member, Presence, Rule rule) {
    if (status.ok()) status = c.rule(name, member, rule);
  });
  KILN_RETURN_IF_ERROR(status);
  return checkKind(c, p);
}

template <class S>
Result<StepParams> parseAs(StepKind kind, const ParamMap& values, const std::string& path) {
  auto parsed = readFields<S>(values, path, kind);
  if (!parsed.ok()) return parsed.error();
  KILN_RETURN_IF_ERROR(checkRanges(RangeCheck(path), *parsed));
  return StepParams(parsed.take());
}

}  // namespace

Result<StepParams> parseStepParams(StepKind kind, const ParamMap& values, const std::string& path) {
  switch (kind) {
    case StepKind::kEmbedding: return parseAs<EmbeddingParams>(kind, values, path);
    case StepKind::kRmsNorm: return parseAs<RmsNormParams>(kind, values, path);
    case StepKind::kResidualRmsNorm: return parseAs<ResidualRmsNormParams>(kind, values, path);
    case StepKind::kGemm: return parseAs<GemmParams>(kind, values, path);
    case StepKind::kRopeKvAppend: return parseAs<RopeKvAppendParams>(kind, values, path);
    case StepKind::kPagedAttention: return parseAs<PagedAttentionParams>(kind, values, path);
    case StepKind::kSiluMul: return parseAs<SiluMulParams>(kind, values, path);
    case StepKind::kAdd:
    case StepKind::kMul:
    case StepKind::kSilu:
    case StepKind::kReluSquared: return parseAs<ElementwiseParams>(kind, values, path);
    case StepKind::kSplit: return parseAs<SplitParams>(kind, values, path);
    case StepKind::kGatherLastTokens: return parseAs<GatherLastTokensParams>(kind, values, path);
    case StepKind::kMoeRouter: return parseAs<MoeRouterParams>(kind, values, path);
    case StepKind::kMoeFfn: return parseAs<MoeFfnParams>(kind, values, path);
    case StepKind::kTreePositions: return parseAs<TreePositionsParams>(kind, values, path);
    case StepKind::kTreeMask: return parseAs<TreeMaskParams>(kind, values, path);
    case StepKind::kAccept: return parseAs<AcceptParams>(kind, values, path);
    case StepKind::kSsmConv1d: return parseAs<SsmConv1dParams>(kind, values, path);
    case StepKind::kSelectiveScan: return parseAs<SelectiveScanParams>(kind, values, path);
    case StepKind::kSsdScan: return parseAs<SsdScanParams>(kind, values, path);
    case StepKind::kSsmGatedNorm: return parseAs<SsmGatedNormParams>(kind, values, path);
    case StepKind::kKvAppend: return parseAs<KvAppendParams>(kind, values, path);
    case StepKind::kAllReduce: return parseAs<AllReduceParams>(kind, values, path);
    case StepKind::kSend:
    case StepKind::kRecv: return parseAs<HandoverParams>(kind, values, path);
  }
  return makeError("{}: unknown step kind", path);
}

ParamMap stepParamsMap(const StepParams& params) {
  ParamMap out;
  std::visit(
      [&](const auto& p) {
        // A default-made struct's values: what an absent optional param reads as.
        const std::decay_t<decltype(p)> defaults{};
        ParamMap absent;
        visitFields(defaults, [&](const char* name, const auto& d, Presence, Rule) { absent[name] = d; });
        visitFields(p, [&](const char* name, const auto& member, Presence presence, Rule) {
          ParamValue value = member;
          if (presence == Presence::kOptional && value == absent[name]) return;
          out[name] = std::move(value);
        });
      },
      params);
  return out;
}

const AttentionHeads* attentionHeads(const StepParams& params) {
  if (const auto* rope = std::get_if<RopeKvAppendParams>(&params)) return &rope->attn;
  if (const auto* attention = std::get_if<PagedAttentionParams>(&params)) return &attention->attn;
  return nullptr;
}

}  // namespace kiln
