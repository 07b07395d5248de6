//===- StepParamAttrs.cpp - plan params as IR attributes -------------------===//

#include "codegen/StepParamAttrs.h"

#include "dialects/xfmr/IR/XfmrDialect.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
namespace json = llvm::json;

namespace kiln {

std::optional<ParamValue> paramValue(Attribute attr) {
  if (auto i = dyn_cast<IntegerAttr>(attr)) {
    if (i.getType().isInteger(1)) return ParamValue(i.getValue().getBoolValue());
    return ParamValue(int64_t(i.getInt()));
  }
  if (auto b = dyn_cast<BoolAttr>(attr)) return ParamValue(b.getValue());
  if (auto f = dyn_cast<FloatAttr>(attr)) return ParamValue(f.getValueAsDouble());
  if (auto s = dyn_cast<StringAttr>(attr)) return ParamValue(s.getValue().str());
  if (auto t = dyn_cast<TypeAttr>(attr)) return ParamValue(xfmr::elementTypeName(t.getValue()));
  if (auto a = dyn_cast<DenseI64ArrayAttr>(attr)) return ParamValue(std::vector<int64_t>(a.asArrayRef()));
  return std::nullopt;
}

Attribute paramAttr(MLIRContext* context, const ParamValue& value) {
  Builder b(context);
  return std::visit(
      [&](const auto& v) -> Attribute {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) return b.getI64IntegerAttr(v);
        else if constexpr (std::is_same_v<T, double>) return b.getF64FloatAttr(v);
        else if constexpr (std::is_same_v<T, bool>) return b.getBoolAttr(v);
        else if constexpr (std::is_same_v<T, std::string>) return b.getStringAttr(v);
        else return b.getDenseI64ArrayAttr(v);
      },
      value);
}

json::Value paramJson(const ParamValue& value) {
  return std::visit(
      [](const auto& v) -> json::Value {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          json::Array values;
          for (int64_t i : v) values.push_back(i);
          return values;
        } else {
          return v;
        }
      },
      value);
}

FailureOr<std::optional<StepParams>> typedStepParams(Operation* op, llvm::StringRef kind,
                                                     DictionaryAttr params) {
  std::optional<StepKind> stepKind = parseStepKind(kind.str());
  if (!stepKind) return std::optional<StepParams>();
  ParamMap values;
  for (NamedAttribute p : params) {
    std::optional<ParamValue> value = paramValue(p.getValue());
    if (!value) {
      op->emitError() << "param '" << p.getName().str() << "' of a " << kind
                      << " step is not an integer, number, boolean, string or integer list";
      return failure();
    }
    values[p.getName().str()] = std::move(*value);
  }
  auto typed = parseStepParams(*stepKind, values, (kind + " params").str());
  if (!typed.ok()) {
    op->emitError() << typed.error().message;
    return failure();
  }
  return std::optional<StepParams>(typed.take());
}

}  // namespace kiln
