//===- KernelVariantAttr.cpp - kernel variants as IR attributes ------------===//

#include "codegen/KernelVariantAttr.h"

#include "codegen/StepParamAttrs.h"
#include "runtime/artifact/step_params_json.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
namespace json = llvm::json;

namespace kiln {
namespace {

// The variant's fields, as the manifest and the attribute both name them.
constexpr llvm::StringLiteral kRole = "role";
constexpr llvm::StringLiteral kRows = "rows";
constexpr llvm::StringLiteral kNeeds = "needs";
constexpr llvm::StringLiteral kKind = "kind";
constexpr llvm::StringLiteral kParams = "params";
constexpr llvm::StringLiteral kInstance = "instance";
constexpr llvm::StringLiteral kOwnStorage = "own_storage";

// One element of `xfmr.variants` as the manifest writes it.
std::optional<json::Object> variantJson(Operation* op, Attribute attr, size_t index) {
  auto bad = [&](llvm::StringRef why) -> std::optional<json::Object> {
    op->emitError() << kVariantsAttrName << "[" << index << "]: " << why;
    return std::nullopt;
  };
  auto dict = dyn_cast<DictionaryAttr>(attr);
  if (!dict) return bad("expected a dictionary");
  json::Object out;
  for (NamedAttribute field : dict) {
    llvm::StringRef name = field.getName().getValue();
    Attribute value = field.getValue();
    if (name == kRole) {
      auto role = dyn_cast<StringAttr>(value);
      if (!role || !parseVariantRole(role.getValue().str())) return bad("role: expected a variant role");
      out[name.str()] = role.getValue().str();
    } else if (name == kRows) {
      auto rows = dyn_cast<DenseI64ArrayAttr>(value);
      if (!rows || rows.size() != 2) return bad("rows: expected array<i64: min, max>");
      out[name.str()] = json::Array{rows[0], rows[1]};
    } else if (name == kNeeds) {
      auto needs = dyn_cast<ArrayAttr>(value);
      if (!needs) return bad("needs: expected an array of feature names");
      json::Array names;
      for (Attribute need : needs) {
        auto feature = dyn_cast<StringAttr>(need);
        if (!feature || !parseKernelFeature(feature.getValue().str()))
          return bad("needs: expected an array of feature names");
        names.push_back(feature.getValue().str());
      }
      out[name.str()] = std::move(names);
    } else if (name == kKind || name == kInstance) {
      auto text = dyn_cast<StringAttr>(value);
      if (!text) return bad((name + ": expected a string").str());
      out[name.str()] = text.getValue().str();
    } else if (name == kParams) {
      auto params = dyn_cast<DictionaryAttr>(value);
      if (!params) return bad("params: expected a dictionary");
      json::Object object;
      for (NamedAttribute p : params) {
        std::optional<ParamValue> param = paramValue(p.getValue());
        if (!param)
          return bad(("params." + p.getName().getValue() +
                      ": expected an integer, number, boolean, string or integer list")
                         .str());
        object[p.getName().str()] = paramJson(*param);
      }
      out[name.str()] = std::move(object);
    } else if (name == kOwnStorage) {
      auto own = dyn_cast<BoolAttr>(value);
      if (!own) return bad("own_storage: expected a boolean");
      out[name.str()] = own.getValue();
    } else {
      return bad(("unknown field '" + name + "'").str());
    }
  }
  if (!out.get(kRole) || !out.get(kRows)) return bad("expected a role and rows");
  return out;
}

}  // namespace

FailureOr<DictionaryAttr> variantAttr(Operation* op, const KernelVariant& variant) {
  MLIRContext* context = op->getContext();
  Builder b(context);
  llvm::SmallVector<NamedAttribute> fields;
  fields.push_back(b.getNamedAttr(kRole, b.getStringAttr(variantRoleName(variant.role))));
  fields.push_back(b.getNamedAttr(kRows, b.getDenseI64ArrayAttr({variant.rows.min, variant.rows.max})));
  if (!variant.needs.empty()) {
    llvm::SmallVector<Attribute> needs;
    for (KernelFeature f : variant.needs) needs.push_back(b.getStringAttr(kernelFeatureName(f)));
    fields.push_back(b.getNamedAttr(kNeeds, b.getArrayAttr(needs)));
  }
  if (roleHasKernel(variant.role)) {
    Result<ParamMap> params = paramsFromJson(variant.params, variant.instance + " params");
    if (!params.ok()) return op->emitError() << params.error().message;
    llvm::SmallVector<NamedAttribute> attrs;
    for (const auto& [name, value] : *params) attrs.push_back(b.getNamedAttr(name, paramAttr(context, value)));
    fields.push_back(b.getNamedAttr(kKind, b.getStringAttr(variant.kind)));
    fields.push_back(b.getNamedAttr(kParams, b.getDictionaryAttr(attrs)));
    fields.push_back(b.getNamedAttr(kInstance, b.getStringAttr(variant.instance)));
  }
  if (variant.own_storage) fields.push_back(b.getNamedAttr(kOwnStorage, b.getBoolAttr(true)));
  return b.getDictionaryAttr(fields);
}

std::optional<json::Array> variantsJson(Operation* op, Attribute variants) {
  auto array = dyn_cast<ArrayAttr>(variants);
  if (!array) {
    op->emitError() << kVariantsAttrName << ": expected an array of dictionaries";
    return std::nullopt;
  }
  json::Array out;
  for (auto [i, attr] : llvm::enumerate(array)) {
    std::optional<json::Object> variant = variantJson(op, attr, i);
    if (!variant) return std::nullopt;
    out.push_back(std::move(*variant));
  }
  return out;
}

}  // namespace kiln
