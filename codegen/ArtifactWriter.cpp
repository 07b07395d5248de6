//===- ArtifactWriter.cpp - lowered xfmr module -> manifest.json -----------===//

#include "codegen/ArtifactWriter.h"

#include "codegen/EntryLayout.h"
#include "codegen/KernelVariantAttr.h"
#include "codegen/MegakernelAttr.h"
#include "codegen/StepParamAttrs.h"
#include "dialects/xfmr/IR/XfmrDialect.h"
#include "runtime/artifact/manifest.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <map>

using namespace mlir;
namespace json = llvm::json;

namespace kiln {
namespace {

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
  llvm::DenseMap<Value, int> poolLayerOf_;        // pool argument -> its layer
  std::map<int, int64_t> slidingWindows_;         // layer -> its attention's window (> 0)
  std::vector<json::Object> stateLayers_;         // state_cache.layers
  std::string stateConvType_;
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
  } else if (isa<xfmr::ConcatOp, xfmr::StackOp>(op)) {
    // Both are row blocks back to back: a stack's inputs are one row each.
    if (auto concat = dyn_cast<xfmr::ConcatOp>(op); concat && concat.getAxis() != 0) return std::nullopt;
    json::Array inputs;
    std::string name;
    for (Value input : op->getOperands()) {
      std::optional<int> id = weightId(input);
      if (!id) return std::nullopt;
      inputs.push_back(*id);
      name += (name.empty() ? "" : "+") +
              (*weights_[*id].getAsObject()->getString("name")).str();
    }
    weight["name"] = name;
    weight["prepare"] = json::Object{{"op", "concat_rows"}, {"inputs", std::move(inputs)}};
  } else if (auto offset = dyn_cast<xfmr::WeightOffsetOp>(op)) {
    std::optional<int> input = weightId(offset.getInput());
    if (!input) return std::nullopt;
    weight["name"] = (*weights_[*input].getAsObject()->getString("name")).str() + ".offset";
    weight["prepare"] = json::Object{{"op", "offset"},
                                     {"inputs", json::Array{*input}},
                                     {"value", offset.getOffset().convertToDouble()}};
  } else if (auto slice = dyn_cast<xfmr::SliceOp>(op)) {
    // A tensor-parallel rank's rows or columns of a weight.
    std::optional<int> input = weightId(slice.getInput());
    if (!input) return std::nullopt;
    weight["name"] = llvm::formatv("{0}[{1}:{2}@{3}]", *weights_[*input].getAsObject()->getString("name"),
                                   slice.getOffset(), slice.getOffset() + slice.getSize(), slice.getAxis())
                         .str();
    weight["prepare"] = json::Object{{"op", "slice"},
                                     {"inputs", json::Array{*input}},
                                     {"axis", slice.getAxis()},
                                     {"offset", slice.getOffset()},
                                     {"size", slice.getSize()}};
  } else if (auto sparsify = dyn_cast<xfmr::SparsifyOp>(op)) {
    std::optional<int> input = weightId(sparsify.getInput());
    if (!input) return std::nullopt;
    weight["name"] = (*weights_[*input].getAsObject()->getString("name")).str() + ".sp24";
    weight["prepare"] = json::Object{{"op", "sparsify"},
                                     {"inputs", json::Array{*input}},
                                     {"pattern", sparsify.getPattern().str()},
                                     {"method", sparsify.getMethod().str()}};
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
      poolLayerOf_[arg] = layerIndex;
      // int8/fp8 pools hold a scale per (token slot, kv head) beside their values.
      const std::string type = xfmr::kvPoolTypeName(pool);
      kvCache_ = json::Object{{"page_size", int64_t(pool.getPageSize())},
                              {"kv_heads", int64_t(pool.getKvHeads())},
                              {"head_dim", int64_t(pool.getHeadDim())},
                              {"type", type}};
      auto scales = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "xfmr.kv_scales");
      if ((type == "int8" || type == "fp8e4m3") != bool(scales) || (scales && scales.getValue() != "token_head")) {
        func.emitError() << "kv pool argument '" << name << "' of type " << type << " has xfmr.kv_scales "
                         << (scales ? "'" + scales.getValue().str() + "'" : std::string("absent"))
                         << ", expected 'token_head' for int8/fp8e4m3 pools and none for float pools";
        return std::nullopt;
      }
      if (scales) (*kvCache_)["scales"] = scales.getValue().str();
      continue;
    }
    if (auto pool = dyn_cast<xfmr::StatePoolType>(arg.getType())) {
      // conv_pool.N / ssm_pool.N
      llvm::StringRef role, layer;
      std::tie(role, layer) = llvm::StringRef(name).split(".");
      unsigned layerIndex = 0;
      if (!role.consume_back("_pool") || (role != "conv" && role != "ssm") || layer.getAsInteger(10, layerIndex)) {
        func.emitError() << "state pool argument " << arg.getArgNumber() << " is named '" << name
                         << "', expected 'conv_pool.N' or 'ssm_pool.N'";
        return std::nullopt;
      }
      blockArgs.try_emplace(arg, json::Object{{"state", json::Object{{"layer", int64_t(layerIndex)},
                                                                      {"role", role.str()}}}});
      if (stateLayers_.size() <= layerIndex) stateLayers_.resize(layerIndex + 1);
      json::Array shape;
      for (int64_t extent : pool.getSlotShape()) shape.push_back(extent);
      const int64_t bytes = pool.slotElements() * (pool.getElementType().getIntOrFloatBitWidth() / 8);
      json::Object& layerJson = stateLayers_[layerIndex];
      layerJson[role.str()] = std::move(shape);
      layerJson[role.str() + "_bytes"] = bytes;
      if (role == "conv") stateConvType_ = xfmr::elementTypeName(pool.getElementType());
      continue;
    }
    auto type = cast<RankedTensorType>(arg.getType());
    inputs.push_back(json::Object{{"name", name},
                                  {"type", xfmr::elementTypeName(type.getElementType())},
                                  {"shape", shapeJson(type)}});
    blockArgs.try_emplace(arg, json::Object{{"input", name}});
  }

  FailureOr<EntryLayout> layout = layoutEntry(func);
  if (failed(layout)) return std::nullopt;
  // Weights are numbered in the order the entry first uses them.
  for (Value weight : layout->weights) {
    if (!weightId(weight)) {
      weight.getDefiningOp()->emitError() << "cannot write this weight's load-time preparation";
      return std::nullopt;
    }
  }

  json::Array steps;
  for (const PlannedStep& step : layout->steps) {
    // Params as the plan schema writes them (the runtime reads what it
    // checked at compile time); kinds it does not have yet (speculative
    // verify's) as the IR has them.
    json::Object params;
    if (step.typedParams) {
      for (const auto& [name, value] : stepParamsMap(*step.typedParams)) params[name] = paramJson(value);
    } else {
      for (NamedAttribute p : step.params) params[p.getName().str()] = attrJson(p.getValue());
    }
    if (step.typedParams)
      if (const auto* attention = std::get_if<PagedAttentionParams>(&*step.typedParams);
          attention && attention->sliding_window > 0 && step.operands.size() > 1)
        if (auto layer = poolLayerOf_.find(step.operands[1].value); layer != poolLayerOf_.end())
          slidingWindows_[layer->second] = attention->sliding_window;
    json::Array args;
    for (const StepOperand& operand : step.operands) {
      switch (operand.kind) {
        case StepOperand::Kind::kArgument: args.push_back(blockArgs.find(operand.value)->second); break;
        case StepOperand::Kind::kWeight: args.push_back(json::Object{{"weight", *weightId(operand.value)}}); break;
        case StepOperand::Kind::kValue: args.push_back(json::Object{{"value", operand.valueId}}); break;
      }
    }
    json::Array results;
    for (int id : step.results) results.push_back(id);
    json::Object stepJson{{"kind", step.kind},
                          {"instance", step.instance},
                          {"params", std::move(params)},
                          {"args", std::move(args)},
                          {"results", std::move(results)}};
    if (Attribute variants = step.op->getAttr(kVariantsAttrName)) {
      std::optional<json::Array> written = variantsJson(step.op, variants);
      if (!written) return std::nullopt;
      stepJson["variants"] = std::move(*written);
    }
    steps.push_back(std::move(stepJson));
  }

  json::Array outputs;
  for (const PlannedOutput& output : layout->outputs)
    outputs.push_back(json::Object{{"name", output.name}, {"value", output.value}});
  json::Array valuesJson;
  for (const PlannedValue& v : layout->values) {
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
  json::Object entryJson{{"inputs", std::move(inputs)},
                         {"values", std::move(valuesJson)},
                         {"arena", json::Object{{"bytes_per_token", layout->bytesPerToken}}},
                         {"steps", std::move(steps)},
                         {"outputs", std::move(outputs)}};
  if (Attribute tasks = func->getAttr(kMegakernelAttrName)) {
    std::optional<json::Value> section = megakernelJson(func, tasks);
    if (!section) return std::nullopt;
    entryJson["megakernel"] = std::move(*section);
  }
  return entryJson;
}

std::optional<json::Value> ManifestBuilder::build(const ModelIdentity& model,
                                                  const CompileOptions& options,
                                                  llvm::StringRef activationType) {
  // The plan says which target its variants are for; a module whose
  // variants were chosen for another (or none, a CPU plan's) would mislead
  // the backend.
  auto chosen = module_->getAttrOfType<StringAttr>(kTargetAttrName);
  llvm::StringRef chosenTarget = chosen ? chosen.getValue() : "cpu";
  if (chosenTarget != options.target) {
    module_.emitError() << "the module's kernel variants are for target '" << chosenTarget
                        << "' (" << kTargetAttrName << "), the options' target is '"
                        << options.target << "': run xfmr-select-kernels with target="
                        << options.target;
    return std::nullopt;
  }
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
  // Each layer's window, for the runtime's block freeing (artifact.md).
  if (kvCache_ && !slidingWindows_.empty()) {
    json::Array windows;
    for (int layer = 0; layer < poolLayers_; ++layer) {
      auto it = slidingWindows_.find(layer);
      windows.push_back(it == slidingWindows_.end() ? int64_t(0) : it->second);
    }
    (*kvCache_)["sliding_windows"] = std::move(windows);
  }
  // A state-space model without attention layers: pools of no layers, the
  // block bookkeeping alone (the scheduler's token accounting).
  if (!kvCache_ && !stateLayers_.empty())
    kvCache_ = json::Object{{"layers", 0}, {"page_size", int64_t(options.page_size)}, {"kv_heads", 0},
                            {"head_dim", 0}, {"type", activationType.str()}};
  std::optional<json::Object> stateCache;
  if (!stateLayers_.empty()) {
    json::Array layers;
    for (json::Object& layer : stateLayers_) layers.push_back(std::move(layer));
    stateCache = json::Object{{"conv_type", stateConvType_}, {"layers", std::move(layers)}};
  }
  json::Object planOptions{{"quant_weights", options.quant_weights},
                           {"quant_group_size", int64_t(options.quant_group_size)},
                           {"quant_kv", options.quant_kv},
                           {"page_size", int64_t(options.page_size)},
                           {"spec_tree", options.spec_tree},
                           {"spec_mode", options.spec_mode},
                           {"target", options.target}};
  json::Array sourceFiles;
  for (const ModelIdentity::File& f : model.files)
    sourceFiles.push_back(json::Object{{"file", f.name},
                                       {"size", int64_t(f.sizeBytes)},
                                       {"mtime", f.mtimeSeconds},
                                       {"sampled_hash", f.sampledHash}});
  // Only a plan with a draft entry names it (others' manifests stay as they were).
  if (options.spec_layerskip > 0) planOptions["spec_layerskip"] = int64_t(options.spec_layerskip);
  if (options.sparsity != "none") {
    planOptions["sparsity"] = options.sparsity;
    planOptions["sparsity_method"] = options.sparsity_method;
  }
  json::Object manifest{
      {"format", "kiln-artifact"},
      {"version", kManifestVersion},
      {"model", json::Object{{"source", model.path},
                             {"source_format", model.format},
                             {"source_size", int64_t(model.sizeBytes)},
                             {"source_mtime", model.mtimeSeconds},
                             {"source_files", std::move(sourceFiles)},
                             {"config", std::move(config)}}},
      {"options", std::move(planOptions)},
      {"activation_type", activationType.str()},
      {"world_size", int64_t(options.tensor_parallel * options.pipeline_parallel)},
      {"rank", int64_t(options.pp_stage * options.tensor_parallel + options.tp_rank)},
      {"weights", std::move(weights_)},
      {"kv_cache", kvCache_ ? json::Value(std::move(*kvCache_)) : json::Value(nullptr)},
      {"entries", std::move(entries)},
  };
  if (stateCache) manifest["state_cache"] = std::move(*stateCache);
  // A multi-rank plan says which shard and stage it is (docs/design/parallelism.md).
  if (options.tensor_parallel * options.pipeline_parallel > 1)
    manifest["parallel"] = json::Object{{"tensor_parallel", int64_t(options.tensor_parallel)},
                                        {"pipeline_parallel", int64_t(options.pipeline_parallel)},
                                        {"tp_rank", int64_t(options.tp_rank)},
                                        {"pp_stage", int64_t(options.pp_stage)}};
  return json::Value(std::move(manifest));
}

}  // namespace

std::optional<json::Value> buildManifest(ModuleOp module, const ModelIdentity& model,
                                         const CompileOptions& options,
                                         llvm::StringRef activationType) {
  return ManifestBuilder(module).build(model, options, activationType);
}

}  // namespace kiln
