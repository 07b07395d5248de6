#include "runtime/artifact/kernel_variant.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

namespace kiln {

namespace {

constexpr std::array<std::pair<VariantRole, const char*>, 21> kRoles{{
    {VariantRole::kStep, "step"},
    {VariantRole::kSkinny, "skinny"},
    {VariantRole::kSingleRow, "single_row"},
    {VariantRole::kFused, "fused"},
    {VariantRole::kFusedSingleRow, "fused_single_row"},
    {VariantRole::kFusedPrefill, "fused_prefill"},
    {VariantRole::kCublasLt, "cublaslt"},
    {VariantRole::kCublasLtResidual, "cublaslt_residual"},
    {VariantRole::kDequantize, "dequantize"},
    {VariantRole::kNormOfSum, "norm_of_sum"},
    {VariantRole::kFoldedIntoNext, "folded_into_next"},
    {VariantRole::kAbsorbed, "absorbed"},
    {VariantRole::kAbsorbedPrefill, "absorbed_prefill"},
    {VariantRole::kDecode, "decode"},
    {VariantRole::kCombine, "combine"},
    {VariantRole::kPrefill, "prefill"},
    {VariantRole::kMoeDown, "moe_down"},
    {VariantRole::kMoeGroupedGateUp, "moe_grouped_gate_up"},
    {VariantRole::kMoeGroupedDown, "moe_grouped_down"},
    {VariantRole::kSparseGemv, "sparse_gemv"},
    {VariantRole::kSparseGemm, "sparse_gemm"},
}};

constexpr std::array<std::pair<KernelFeature, const char*>, 5> kFeatures{{
    {KernelFeature::kStreamGemv, "stream_gemv"},
    {KernelFeature::kFoldNorms, "fold_norms"},
    {KernelFeature::kResidualEpilogue, "residual_epilogue"},
    {KernelFeature::kFusedSwiGlu, "fused_swiglu"},
    {KernelFeature::kFlashAttention, "flash_attention"},
}};

// The roles a step of `kind` may list.
std::vector<VariantRole> rolesOf(StepKind kind) {
  using R = VariantRole;
  switch (kind) {
    case StepKind::kGemm:
      return {R::kSkinny,   R::kSingleRow,        R::kFused,     R::kFusedSingleRow, R::kFusedPrefill,
              R::kCublasLt, R::kCublasLtResidual, R::kDequantize, R::kSparseGemv, R::kSparseGemm};
    case StepKind::kResidualRmsNorm: return {R::kStep, R::kNormOfSum, R::kFoldedIntoNext};
    case StepKind::kSiluMul: return {R::kStep, R::kAbsorbed, R::kAbsorbedPrefill};
    case StepKind::kRopeKvAppend: return {R::kStep, R::kAbsorbed};
    case StepKind::kPagedAttention: return {R::kStep, R::kDecode, R::kCombine, R::kPrefill};
    case StepKind::kMoeFfn: return {R::kStep, R::kMoeDown, R::kCombine, R::kMoeGroupedGateUp, R::kMoeGroupedDown};
    default: return {R::kStep};
  }
}

// An enum value's name in a {value, name} table, and back.
template <class E, size_t N>
const char* nameIn(const std::array<std::pair<E, const char*>, N>& table, E value) {
  for (const auto& [v, name] : table)
    if (v == value) return name;
  return "?";
}
template <class E, size_t N>
std::optional<E> valueIn(const std::array<std::pair<E, const char*>, N>& table, std::string_view name) {
  for (const auto& [v, n] : table)
    if (name == n) return v;
  return std::nullopt;
}

bool symbolName(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

}  // namespace

const char* variantRoleName(VariantRole role) { return nameIn(kRoles, role); }

std::optional<VariantRole> parseVariantRole(std::string_view name) { return valueIn(kRoles, name); }

bool roleHasKernel(VariantRole role) {
  switch (role) {
    case VariantRole::kCublasLt:
    case VariantRole::kCublasLtResidual:
    case VariantRole::kFoldedIntoNext:
    case VariantRole::kAbsorbed:
    case VariantRole::kAbsorbedPrefill: return false;
    default: return true;
  }
}

const char* kernelFeatureName(KernelFeature feature) { return nameIn(kFeatures, feature); }

std::optional<KernelFeature> parseKernelFeature(std::string_view name) { return valueIn(kFeatures, name); }

nlohmann::json toJson(const KernelVariant& variant) {
  nlohmann::json out{{"role", variantRoleName(variant.role)}, {"rows", {variant.rows.min, variant.rows.max}}};
  if (!variant.needs.empty()) {
    nlohmann::json needs = nlohmann::json::array();
    for (KernelFeature f : variant.needs) needs.push_back(kernelFeatureName(f));
    out["needs"] = std::move(needs);
  }
  if (roleHasKernel(variant.role)) {
    out["kind"] = variant.kind;
    out["params"] = variant.params;
    out["instance"] = variant.instance;
  }
  if (variant.own_storage) out["own_storage"] = true;
  return out;
}

Result<KernelVariant> variantFromJson(const nlohmann::json& v, StepKind kind, const std::string& path) {
  if (!v.is_object()) return makeError("{}: expected an object, got {}", path, v.type_name());
  KernelVariant out;
  const auto role = v.find("role");
  if (role == v.end() || !role->is_string()) return makeError("{}.role: expected a string", path);
  const std::optional<VariantRole> parsed = parseVariantRole(role->get<std::string>());
  const std::vector<VariantRole> allowed = rolesOf(kind);
  std::string names;
  for (VariantRole r : allowed) names += fmt::format("{}{}", names.empty() ? "" : ", ", variantRoleName(r));
  if (!parsed || std::find(allowed.begin(), allowed.end(), *parsed) == allowed.end())
    return makeError("{}.role: '{}' is not a variant of a {} step (expected one of {})", path,
                     role->get<std::string>(), stepKindName(kind), names);
  out.role = *parsed;

  const auto rows = v.find("rows");
  if (rows == v.end() || !rows->is_array() || rows->size() != 2 || !(*rows)[0].is_number_integer() ||
      !(*rows)[1].is_number_integer())
    return makeError("{}.rows: expected [min, max], two integers", path);
  out.rows = {(*rows)[0].get<int64_t>(), (*rows)[1].get<int64_t>()};
  if (out.rows.min < 1 || (out.rows.max != RowRange::kUnbounded && out.rows.max < out.rows.min))
    return makeError("{}.rows: [{}, {}] is not a range of row counts (min >= 1, max >= min or -1)", path,
                     out.rows.min, out.rows.max);

  if (const auto needs = v.find("needs"); needs != v.end()) {
    if (!needs->is_array()) return makeError("{}.needs: expected an array of feature names", path);
    for (size_t i = 0; i < needs->size(); ++i) {
      const nlohmann::json& n = (*needs)[i];
      const std::optional<KernelFeature> f = n.is_string() ? parseKernelFeature(n.get<std::string>()) : std::nullopt;
      if (!f)
        return makeError("{}.needs[{}]: {} is not a feature (stream_gemv, fold_norms, residual_epilogue, "
                         "fused_swiglu, flash_attention)",
                         path, i, n.dump());
      out.needs.push_back(*f);
    }
  }
  const bool kernel = roleHasKernel(out.role);
  for (const char* key : {"kind", "params", "instance"})
    if (v.contains(key) != kernel)
      return makeError("{}: a '{}' variant {} '{}'", path, variantRoleName(out.role),
                       kernel ? "runs a kernel and needs" : "runs no kernel of its own and takes no", key);
  if (kernel) {
    if (!v["kind"].is_string() || !v["instance"].is_string() || !v["params"].is_object())
      return makeError("{}: expected kind and instance strings and a params object", path);
    out.kind = v["kind"].get<std::string>();
    out.params = v["params"];
    out.instance = v["instance"].get<std::string>();
    if (!symbolName(out.instance))
      return makeError("{}.instance: '{}' is not a kernel symbol (letters, digits and _)", path, out.instance);
  }
  if (const auto own = v.find("own_storage"); own != v.end()) {
    if (!own->is_boolean()) return makeError("{}.own_storage: expected a boolean", path);
    out.own_storage = own->get<bool>();
  }
  return out;
}

bool KernelFeatures::on(KernelFeature f) const {
  switch (f) {
    case KernelFeature::kStreamGemv: return stream_gemv;
    case KernelFeature::kFoldNorms: return fold_norms;
    case KernelFeature::kResidualEpilogue: return residual_epilogue;
    case KernelFeature::kFusedSwiGlu: return fused_swiglu;
    case KernelFeature::kFlashAttention: return flash_attention;
  }
  return false;
}

std::vector<const KernelVariant*> chooseVariants(const std::vector<KernelVariant>& variants,
                                                 const KernelFeatures& features) {
  std::vector<const KernelVariant*> chosen;
  for (const KernelVariant& v : variants) {
    if (!std::all_of(v.needs.begin(), v.needs.end(), [&](KernelFeature f) { return features.on(f); })) continue;
    const bool taken = std::any_of(chosen.begin(), chosen.end(), [&](const KernelVariant* c) { return c->role == v.role; });
    if (!taken) chosen.push_back(&v);
  }
  return chosen;
}

}  // namespace kiln
