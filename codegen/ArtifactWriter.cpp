//===- ArtifactWriter.cpp - lowered xfmr module -> manifest.json -----------===//

#include "codegen/ArtifactWriter.h"

#include "dialects/xfmr/IR/XfmrDialect.h"
#include "runtime/artifact/plan_keys.h"
#include "runtime/artifact/step_params.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cstdio>

using namespace mlir;
namespace json = llvm::json;

namespace kiln {
namespace {

// Arena offsets are planned in bytes per row; 64-byte rows keep every value
// aligned for vector loads whatever the token budget.
constexpr int64_t kRowAlignment = 64;

std::optional<int64_t> elementBytes(Type type) {
  if (type.isIntOrFloat()) return (type.getIntOrFloatBitWidth() + 7) / 8;
  return std::nullopt;
}

json::Array shapeJson(RankedTensorType type) {
  json::Array shape;
  for (int64_t extent : type.getShape())
    shape.push_back(ShapedType::isDynamic(extent) ? int64_t(-1) : extent);
  return shape;
}

json::Value attrJson(Attribute attr) {
  if (auto i = dyn_cast<IntegerAttr>(attr)) {
    if (i.getType().isInteger(1)) return i.getValue().getBoolValue();
    return i.getInt();
  }
  if (auto b = dyn_cast<BoolAttr>(attr)) return b.getValue();
  if (auto f = dyn_cast<FloatAttr>(attr)) return f.getValueAsDouble();
  if (auto s = dyn_cast<StringAttr>(attr)) return s.getValue().str();
  if (auto a = dyn_cast<DenseI64ArrayAttr>(attr)) {
    json::Array values;
    for (int64_t v : a.asArrayRef()) values.push_back(v);
    return values;
  }
  if (auto d = dyn_cast<DictionaryAttr>(attr)) {
    json::Object object;
    for (NamedAttribute entry : d) object[entry.getName().str()] = attrJson(entry.getValue());
    return object;
  }
  if (auto t = dyn_cast<TypeAttr>(attr)) return xfmr::elementTypeName(t.getValue());
  std::string text;
  llvm::raw_string_ostream os(text);
  attr.print(os);
  return text;
}

// A kernel param as the plan schema takes it (step_params.h).
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

// A step's params written through the plan schema: parsed and range-checked
// as the runtime will read them, so a plan the runtime rejects is a compile
// error here. Kinds the schema does not have yet (speculative verify's
// tree_positions, tree_mask, accept) are written as the IR has them.
std::optional<json::Object> stepParams(Operation* op, llvm::StringRef kind, DictionaryAttr params) {
  json::Object out;
  std::optional<StepKind> stepKind = parseStepKind(kind.str());
  if (!stepKind) {
    for (NamedAttribute p : params) out[p.getName().str()] = attrJson(p.getValue());
    return out;
  }
  ParamMap values;
  for (NamedAttribute p : params) {
    std::optional<ParamValue> value = paramValue(p.getValue());
    if (!value) {
      op->emitError() << "param '" << p.getName().str() << "' of a " << kind
                      << " step is not an integer, number, boolean, string or integer list";
      return std::nullopt;
    }
    values[p.getName().str()] = std::move(*value);
  }
  auto typed = parseStepParams(*stepKind, values, (kind + " params").str());
  if (!typed.ok()) {
    op->emitError() << typed.error().message;
    return std::nullopt;
  }
  for (const auto& [name, value] : stepParamsMap(*typed)) out[name] = paramJson(value);
  return out;
}

std::string paramText(Attribute attr) {
  if (auto i = dyn_cast<IntegerAttr>(attr))
    return i.getType().isInteger(1) ? (i.getValue().getBoolValue() ? "1" : "0")
                                    : std::to_string(i.getInt());
  if (auto b = dyn_cast<BoolAttr>(attr)) return b.getValue() ? "1" : "0";
  if (auto f = dyn_cast<FloatAttr>(attr)) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", f.getValueAsDouble());
    return text;
  }
  if (auto s = dyn_cast<StringAttr>(attr)) return s.getValue().str();
  if (auto a = dyn_cast<DenseI64ArrayAttr>(attr)) {
    std::string joined;
    for (int64_t v : a.asArrayRef()) joined += (joined.empty() ? "" : "x") + std::to_string(v);
    return joined;
  }
  return "attr";
}

// One value of an entry's arena.
struct PlannedValue {
  int id = 0;
  RankedTensorType type;
  bool perSequence = false;  // rows are sequences (after gather_last_tokens)
  int64_t rowBytes = 0;      // bytes of one row (all of it for fixed-shape values)
  int viewOf = -1;           // aliases another value's storage
  int defined = 0, lastUse = 0;  // step indices
  int64_t offset = 0;        // bytes per row of the token budget
};

class ManifestBuilder {
 public:
  ManifestBuilder(ModuleOp module) : module_(module) {}

  std::optional<json::Value> build(const ModelIdentity& model,
                                   const CompileOptions& options,
                                   llvm::StringRef activationType);

 private:
  std::optional<int> weightId(Value value);
  std::optional<json::Object> entry(func::FuncOp func);

  ModuleOp module_;
  json::Array weights_;
  llvm::DenseMap<Value, int> weightIds_;
  llvm::StringMap<int> weightIdsByName_;
  std::optional<json::Object> kvCache_;
  int poolLayers_ = 0;
};

// The weight id of `value` (a checkpoint tensor or a load-time preparation of
// weights), registering it on first sight; nullopt if it is not weight-only.
std::optional<int> ManifestBuilder::weightId(Value value) {
  if (auto it = weightIds_.find(value); it != weightIds_.end()) return it->second;
  Operation* op = value.getDefiningOp();
  if (!op) return std::nullopt;
  auto type = cast<RankedTensorType>(value.getType());
  json::Object weight;
  if (auto ref = dyn_cast<xfmr::WeightOp>(op)) {
    if (auto it = weightIdsByName_.find(ref.getName()); it != weightIdsByName_.end()) {
      weightIds_[value] = it->second;
      return it->second;
    }
    weight["name"] = ref.getName().str();
    weight["source"] = ref.getName().str();
  } else if (auto concat = dyn_cast<xfmr::ConcatOp>(op)) {
    if (concat.getAxis() != 0) return std::nullopt;
    json::Array inputs;
    std::string name;
    for (Value input : concat.getInputs()) {
      std::optional<int> id = weightId(input);
      if (!id) return std::nullopt;
      inputs.push_back(*id);
      name += (name.empty() ? "" : "+") +
              (*weights_[*id].getAsObject()->getString("name")).str();
    }
    weight["name"] = name;
    weight["prepare"] = json::Object{{"op", "concat_rows"}, {"inputs", std::move(inputs)}};
  } else if (auto quantize = dyn_cast<xfmr::QuantizeOp>(op)) {
    std::optional<int> input = weightId(quantize.getInput());
    if (!input) return std::nullopt;
    auto quantType = dyn_cast<xfmr::QuantType>(
        cast<RankedTensorType>(quantize->getResult(0).getType()).getElementType());
    unsigned resultIndex = cast<OpResult>(value).getResultNumber();
    weight["name"] = (*weights_[*input].getAsObject()->getString("name")).str() +
                     (resultIndex == 0 ? "" : ".scales");
    json::Object prepare{{"op", "quantize"},
                         {"inputs", json::Array{*input}},
                         {"result", int64_t(resultIndex)}};
    if (quantType) {
      prepare["scheme"] = quantType.getKind().str();
      prepare["group"] = int64_t(quantType.getBlock());
    }
    weight["prepare"] = std::move(prepare);
  } else {
    return std::nullopt;
  }
  int id = static_cast<int>(weights_.size());
  weight["id"] = id;
  weight["type"] = xfmr::elementTypeName(type.getElementType());
  weight["shape"] = shapeJson(type);
  if (auto ref = dyn_cast<xfmr::WeightOp>(op)) weightIdsByName_[ref.getName()] = id;
  weights_.push_back(std::move(weight));
  weightIds_[value] = id;
  return id;
}

std::optional<json::Object> ManifestBuilder::entry(func::FuncOp func) {
  Block& body = func.getBody().front();
  json::Array inputs;
  llvm::DenseMap<Value, json::Value> blockArgs;  // arg -> its manifest reference
  for (BlockArgument arg : body.getArguments()) {
    auto nameAttr = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "xfmr.name");
    std::string name = nameAttr ? nameAttr.str() : "arg" + std::to_string(arg.getArgNumber());
    if (auto pool = dyn_cast<xfmr::KvPoolType>(arg.getType())) {
      // k_pool.N / v_pool.N
      llvm::StringRef role, layer;
      std::tie(role, layer) = llvm::StringRef(name).split(".");
      int layerIndex = 0;
      if (!role.consume_back("_pool") || layer.getAsInteger(10, layerIndex)) {
        func.emitError() << "kv pool argument " << arg.getArgNumber() << " is named '"
                         << name << "', expected 'k_pool.N' or 'v_pool.N'";
        return std::nullopt;
      }
      blockArgs.try_emplace(arg, json::Object{{"pool", json::Object{
                                         {"layer", layerIndex}, {"role", role.str()}}}});
      poolLayers_ = std::max(poolLayers_, layerIndex + 1);
      kvCache_ = json::Object{{"page_size", int64_t(pool.getPageSize())},
                              {"kv_heads", int64_t(pool.getKvHeads())},
                              {"head_dim", int64_t(pool.getHeadDim())},
                              {"type", xfmr::elementTypeName(pool.getElementType())}};
      continue;
    }
    auto type = cast<RankedTensorType>(arg.getType());
    inputs.push_back(json::Object{{"name", name},
                                  {"type", xfmr::elementTypeName(type.getElementType())},
                                  {"shape", shapeJson(type)}});
    blockArgs.try_emplace(arg, json::Object{{"input", name}});
  }

  // Values and steps, in program order.
  std::vector<PlannedValue> values;
  llvm::DenseMap<Value, int> valueIds;
  json::Array steps;
  auto defineValue = [&](Value v, int step, bool perSequence, int viewOf) -> bool {
    auto type = cast<RankedTensorType>(v.getType());
    std::optional<int64_t> bytes = elementBytes(type.getElementType());
    if (!bytes) {
      v.getDefiningOp()->emitError() << "cannot plan a buffer of element type "
                                     << type.getElementType();
      return false;
    }
    int64_t rowBytes = *bytes;
    bool rowMajorDynamic = type.getRank() > 0 && type.isDynamicDim(0);
    for (int64_t d = rowMajorDynamic ? 1 : 0; d < type.getRank(); ++d) {
      if (type.isDynamicDim(d)) {
        v.getDefiningOp()->emitError()
            << "cannot plan " << type << ": only the first dimension (rows) may "
               "be dynamic";
        return false;
      }
      rowBytes *= type.getDimSize(d);
    }
    PlannedValue planned;
    planned.id = static_cast<int>(values.size());
    planned.type = type;
    planned.perSequence = perSequence;
    planned.rowBytes = rowBytes;
    planned.viewOf = viewOf;
    planned.defined = planned.lastUse = step;
    valueIds[v] = planned.id;
    values.push_back(planned);
    return true;
  };
  auto reference = [&](Value v, int step) -> std::optional<json::Value> {
    if (auto it = blockArgs.find(v); it != blockArgs.end()) return it->second;
    if (auto it = valueIds.find(v); it != valueIds.end()) {
      int id = it->second;
      values[id].lastUse = std::max(values[id].lastUse, step);
      return json::Object{{"value", id}};
    }
    if (std::optional<int> id = weightId(v)) return json::Object{{"weight", *id}};
    return std::nullopt;
  };
  auto perSequenceOperand = [&](Operation* op) {
    return llvm::any_of(op->getOperands(), [&](Value operand) {
      auto it = valueIds.find(operand);
      return it != valueIds.end() && values[it->second].perSequence;
    });
  };

  for (Operation& op : body) {
    int step = static_cast<int>(steps.size());
    if (auto reshape = dyn_cast<xfmr::ReshapeOp>(op)) {
      auto source = valueIds.find(reshape.getInput());
      if (source == valueIds.end()) continue;  // a reshape of weights
      int root = values[source->second].viewOf >= 0 ? values[source->second].viewOf
                                                    : source->second;
      values[source->second].lastUse = std::max(values[source->second].lastUse, step);
      if (!defineValue(reshape.getResult(), step, values[root].perSequence, root))
        return std::nullopt;
      continue;
    }
    if (isa<func::ReturnOp, xfmr::WeightOp>(op)) continue;
    if (op.getNumResults() > 0 && weightId(op.getResult(0))) continue;

    json::Object stepJson;
    json::Object params;
    if (auto kernel = dyn_cast<xfmr::KernelOp>(op)) {
      stepJson["kind"] = kernel.getKind().str();
      stepJson["instance"] = kernelInstanceName(kernel.getKind(), kernel.getParams());
      std::optional<json::Object> written = stepParams(&op, kernel.getKind(), kernel.getParams());
      if (!written) return std::nullopt;
      params = std::move(*written);
    } else if (auto gemm = dyn_cast<xfmr::GemmOp>(op)) {
      auto weight = cast<RankedTensorType>(gemm.getWeight().getType());
      std::string weightType = xfmr::elementTypeName(weight.getElementType());
      Builder b(op.getContext());
      auto paramDict = b.getDictionaryAttr({
          b.getNamedAttr(plan_key::kN, b.getI64IntegerAttr(weight.getDimSize(0))),
          b.getNamedAttr(plan_key::kK, b.getI64IntegerAttr(weight.getDimSize(1))),
          b.getNamedAttr(plan_key::kWeightType, b.getStringAttr(weightType)),
          b.getNamedAttr(plan_key::kBias, b.getBoolAttr(static_cast<bool>(gemm.getBias()))),
          b.getNamedAttr(plan_key::kScales, b.getBoolAttr(static_cast<bool>(gemm.getScales())))});
      stepJson["kind"] = "gemm";
      stepJson["instance"] = kernelInstanceName("gemm", paramDict);
      llvm::SmallVector<NamedAttribute> withRole(paramDict.getValue());
      if (auto role = op.getAttrOfType<StringAttr>(plan_key::kRole)) withRole.push_back(b.getNamedAttr(plan_key::kRole, role));
      std::optional<json::Object> written = stepParams(&op, "gemm", b.getDictionaryAttr(withRole));
      if (!written) return std::nullopt;
      params = std::move(*written);
    } else {
      op.emitError() << "cannot emit '" << op.getName()
                     << "' into the artifact: run xfmr-lower-to-kernels first";
      return std::nullopt;
    }
    json::Array args;
    for (Value operand : op.getOperands()) {
      std::optional<json::Value> ref = reference(operand, step);
      if (!ref) {
        op.emitError() << "operand of '" << op.getName()
                       << "' is neither an entry input, a weight nor a planned value";
        return std::nullopt;
      }
      args.push_back(std::move(*ref));
    }
    bool perSequence = perSequenceOperand(&op) ||
                       (isa<xfmr::KernelOp>(op) &&
                        cast<xfmr::KernelOp>(op).getKind() == "gather_last_tokens");
    json::Array results;
    for (Value result : op.getResults()) {
      if (!defineValue(result, step, perSequence, -1)) return std::nullopt;
      results.push_back(valueIds[result]);
    }
    stepJson["params"] = std::move(params);
    stepJson["args"] = std::move(args);
    stepJson["results"] = std::move(results);
    steps.push_back(std::move(stepJson));
  }

  // Outputs stay live to the end.
  json::Array outputs;
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (auto [i, operand] : llvm::enumerate(ret.getOperands())) {
    auto it = valueIds.find(operand);
    if (it == valueIds.end()) {
      ret.emitError() << "result " << i << " of @" << func.getName()
                      << " is not computed by a step";
      return std::nullopt;
    }
    values[it->second].lastUse = static_cast<int>(steps.size());
    std::string name = i == 0 ? "logits" : "result" + std::to_string(i);
    if (auto named = func.getResultAttrOfType<StringAttr>(i, "xfmr.name"))
      name = named.str();
    outputs.push_back(json::Object{{"name", name}, {"value", it->second}});
  }
  // A view keeps its source alive for as long as the view is used.
  for (PlannedValue& v : values)
    if (v.viewOf >= 0)
      values[v.viewOf].lastUse = std::max(values[v.viewOf].lastUse, v.lastUse);

  // First fit over live ranges, in bytes per row.
  std::vector<const PlannedValue*> placed;
  int64_t bytesPerToken = 0;
  for (PlannedValue& v : values) {
    if (v.viewOf >= 0) continue;
    int64_t size = llvm::alignTo(v.rowBytes, kRowAlignment);
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const PlannedValue* other : placed)
      if (other->lastUse >= v.defined && v.lastUse >= other->defined)
        busy.push_back({other->offset, other->offset + llvm::alignTo(other->rowBytes, kRowAlignment)});
    llvm::sort(busy);
    int64_t offset = 0;
    for (auto [begin, end] : busy) {
      if (offset + size <= begin) break;
      offset = std::max(offset, end);
    }
    v.offset = offset;
    bytesPerToken = std::max(bytesPerToken, offset + size);
    placed.push_back(&v);
  }

  json::Array valuesJson;
  for (const PlannedValue& v : values) {
    json::Object object{{"id", v.id},
                        {"type", xfmr::elementTypeName(v.type.getElementType())},
                        {"shape", shapeJson(v.type)},
                        {"rows", v.type.getRank() > 0 && v.type.isDynamicDim(0)
                                     ? (v.perSequence ? "sequences" : "tokens")
                                     : "fixed"},
                        {"row_bytes", v.rowBytes}};
    if (v.viewOf >= 0)
      object["view_of"] = v.viewOf;
    else
      object["offset"] = v.offset;
    valuesJson.push_back(std::move(object));
  }
  return json::Object{{"inputs", std::move(inputs)},
                      {"values", std::move(valuesJson)},
                      {"arena", json::Object{{"bytes_per_token", bytesPerToken}}},
                      {"steps", std::move(steps)},
                      {"outputs", std::move(outputs)}};
}

std::optional<json::Value> ManifestBuilder::build(const ModelIdentity& model,
                                                  const CompileOptions& options,
                                                  llvm::StringRef activationType) {
  json::Object entries;
  for (auto func : module_.getOps<func::FuncOp>()) {
    std::optional<json::Object> e = entry(func);
    if (!e) return std::nullopt;
    entries[func.getName().str()] = std::move(*e);
  }
  if (!entries.get("forward")) {
    module_.emitError() << "the module has no @forward entry";
    return std::nullopt;
  }
  json::Object config;
  if (auto attr = module_->getAttrOfType<DictionaryAttr>("xfmr.config"))
    config = std::move(*attrJson(attr).getAsObject());
  if (kvCache_) (*kvCache_)["layers"] = poolLayers_;
  return json::Object{
      {"format", "kiln-artifact"},
      {"version", 1},
      {"model", json::Object{{"source", model.path},
                             {"source_format", model.format},
                             {"source_size", int64_t(model.sizeBytes)},
                             {"source_mtime", model.mtimeSeconds},
                             {"config", std::move(config)}}},
      {"options", json::Object{{"quant_weights", options.quant_weights},
                               {"quant_group_size", int64_t(options.quant_group_size)},
                               {"quant_kv", options.quant_kv},
                               {"page_size", int64_t(options.page_size)},
                               {"spec_tree", options.spec_tree},
                               {"spec_mode", options.spec_mode}}},
      {"activation_type", activationType.str()},
      {"world_size", 1},
      {"rank", 0},
      {"weights", std::move(weights_)},
      {"kv_cache", kvCache_ ? json::Value(std::move(*kvCache_)) : json::Value(nullptr)},
      {"entries", std::move(entries)},
  };
}

}  // namespace

std::string kernelInstanceName(llvm::StringRef kind, DictionaryAttr params) {
  std::string name = kind.str();
  for (NamedAttribute p : params) {
    name += "_";
    name += p.getName().str();
    name += paramText(p.getValue());
  }
  for (char& c : name) {
    if (c == '.') c = 'p';
    else if (c == '-') c = 'm';
    else if (!llvm::isAlnum(c) && c != '_') c = '_';
  }
  return name;
}

std::optional<json::Value> buildManifest(ModuleOp module, const ModelIdentity& model,
                                         const CompileOptions& options,
                                         llvm::StringRef activationType) {
  return ManifestBuilder(module).build(model, options, activationType);
}

}  // namespace kiln
