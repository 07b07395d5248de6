//===- EntryLayout.cpp - one entry's values, steps and arena ---------------===//

#include "codegen/EntryLayout.h"

#include "codegen/StepParamAttrs.h"
#include "dialects/xfmr/IR/XfmrDialect.h"
#include "runtime/artifact/plan_keys.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cstdio>

using namespace mlir;

namespace kiln {
namespace {

// 64-byte rows keep every value aligned for vector loads whatever the token
// budget.
constexpr int64_t kRowAlignment = 64;

std::optional<int64_t> elementBytes(Type type) {
  if (type.isIntOrFloat()) return (type.getIntOrFloatBitWidth() + 7) / 8;
  return std::nullopt;
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

// A gemm's params, which the op carries as operand types: the weight's
// shape and element type, whether it has a bias and scales, and for
// kiln's schemes (which have scales) the columns a scale covers (the quant
// type's block; per row: k).
DictionaryAttr gemmParams(xfmr::GemmOp gemm) {
  auto weight = cast<RankedTensorType>(gemm.getWeight().getType());
  Builder b(gemm.getContext());
  const int64_t k = weight.getDimSize(1);
  SmallVector<NamedAttribute> params = {
      b.getNamedAttr(plan_key::kN, b.getI64IntegerAttr(weight.getDimSize(0))),
      b.getNamedAttr(plan_key::kK, b.getI64IntegerAttr(k)),
      b.getNamedAttr(plan_key::kWeightType,
                     b.getStringAttr(xfmr::elementTypeName(weight.getElementType()))),
      b.getNamedAttr(plan_key::kBias, b.getBoolAttr(static_cast<bool>(gemm.getBias()))),
      b.getNamedAttr(plan_key::kScales, b.getBoolAttr(static_cast<bool>(gemm.getScales())))};
  if (auto quant = dyn_cast<xfmr::QuantType>(weight.getElementType()); quant && gemm.getScales())
    params.push_back(b.getNamedAttr(plan_key::kGroup, b.getI64IntegerAttr(quant.getBlock() == 0 ? k : quant.getBlock())));
  return b.getDictionaryAttr(params);
}

// Builds one entry's layout in a single walk over the body.
class LayoutBuilder {
 public:
  explicit LayoutBuilder(func::FuncOp func) : func_(func) {}
  FailureOr<EntryLayout> build();

 private:
  LogicalResult defineValue(Value v, int step, bool perSequence, int viewOf);
  std::optional<StepOperand> operand(Value v, int step);
  void sawWeight(Value v) {
    if (seenWeights_.insert(v).second) layout_.weights.push_back(v);
  }
  LogicalResult addStep(Operation& op);
  void placeValues();

  func::FuncOp func_;
  EntryLayout layout_;
  llvm::DenseMap<Value, int> valueIds_;
  llvm::DenseSet<Value> seenWeights_;
};

LogicalResult LayoutBuilder::defineValue(Value v, int step, bool perSequence, int viewOf) {
  auto type = cast<RankedTensorType>(v.getType());
  std::optional<int64_t> bytes = elementBytes(type.getElementType());
  if (!bytes)
    return v.getDefiningOp()->emitError() << "cannot plan a buffer of element type "
                                          << type.getElementType();
  int64_t rowBytes = *bytes;
  bool rowMajorDynamic = type.getRank() > 0 && type.isDynamicDim(0);
  for (int64_t d = rowMajorDynamic ? 1 : 0; d < type.getRank(); ++d) {
    if (type.isDynamicDim(d))
      return v.getDefiningOp()->emitError()
             << "cannot plan " << type << ": only the first dimension (rows) may be dynamic";
    rowBytes *= type.getDimSize(d);
  }
  PlannedValue planned;
  planned.id = static_cast<int>(layout_.values.size());
  planned.type = type;
  planned.perSequence = perSequence;
  planned.rowBytes = rowBytes;
  planned.viewOf = viewOf;
  planned.defined = planned.lastUse = step;
  valueIds_[v] = planned.id;
  layout_.values.push_back(planned);
  return success();
}

// `v` read by step `step`; extends a value's live range to it.
std::optional<StepOperand> LayoutBuilder::operand(Value v, int step) {
  if (auto arg = dyn_cast<BlockArgument>(v); arg && arg.getOwner() == &func_.getBody().front())
    return StepOperand{StepOperand::Kind::kArgument, v};
  if (auto it = valueIds_.find(v); it != valueIds_.end()) {
    PlannedValue& planned = layout_.values[it->second];
    planned.lastUse = std::max(planned.lastUse, step);
    return StepOperand{StepOperand::Kind::kValue, v, planned.id};
  }
  if (isWeightValue(v)) {
    sawWeight(v);
    return StepOperand{StepOperand::Kind::kWeight, v};
  }
  return std::nullopt;
}

LogicalResult LayoutBuilder::addStep(Operation& op) {
  int index = static_cast<int>(layout_.steps.size());
  PlannedStep step;
  step.op = &op;
  if (auto kernel = dyn_cast<xfmr::KernelOp>(op)) {
    step.kind = kernel.getKind().str();
    step.params = kernel.getParams();
    step.instance = kernelInstanceName(step.kind, step.params);
  } else if (auto gemm = dyn_cast<xfmr::GemmOp>(op)) {
    DictionaryAttr params = gemmParams(gemm);
    step.kind = "gemm";
    step.instance = kernelInstanceName(step.kind, params);
    llvm::SmallVector<NamedAttribute> withRole(params.getValue());
    if (auto role = op.getAttrOfType<StringAttr>(plan_key::kRole))
      withRole.push_back(NamedAttribute(StringAttr::get(op.getContext(), plan_key::kRole), role));
    step.params = DictionaryAttr::get(op.getContext(), withRole);
  } else {
    return op.emitError() << "cannot plan '" << op.getName()
                          << "' as a step: the plan takes kernel-level IR (run xfmr-lower-to-kernels first)";
  }
  FailureOr<std::optional<StepParams>> typed = typedStepParams(&op, step.kind, step.params);
  if (failed(typed)) return failure();
  step.typedParams = std::move(*typed);

  bool perSequence = step.kind == "gather_last_tokens";
  for (Value v : op.getOperands()) {
    std::optional<StepOperand> ref = operand(v, index);
    if (!ref)
      return op.emitError() << "operand of '" << op.getName()
                            << "' is neither an entry input, a weight nor a planned value";
    if (ref->kind == StepOperand::Kind::kValue && layout_.values[ref->valueId].perSequence)
      perSequence = true;
    step.operands.push_back(*ref);
  }
  for (Value result : op.getResults()) {
    if (failed(defineValue(result, index, perSequence, -1))) return failure();
    step.results.push_back(valueIds_[result]);
  }
  layout_.steps.push_back(std::move(step));
  return success();
}

// First fit over live ranges, in bytes per row.
void LayoutBuilder::placeValues() {
  std::vector<PlannedValue>& values = layout_.values;
  // A view keeps its source alive for as long as the view is used.
  for (PlannedValue& v : values)
    if (v.viewOf >= 0) values[v.viewOf].lastUse = std::max(values[v.viewOf].lastUse, v.lastUse);
  std::vector<const PlannedValue*> placed;
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
    layout_.bytesPerToken = std::max(layout_.bytesPerToken, offset + size);
    placed.push_back(&v);
  }
}

FailureOr<EntryLayout> LayoutBuilder::build() {
  Block& body = func_.getBody().front();
  for (Operation& op : body) {
    int step = static_cast<int>(layout_.steps.size());
    if (auto reshape = dyn_cast<xfmr::ReshapeOp>(op)) {
      auto source = valueIds_.find(reshape.getInput());
      if (source == valueIds_.end()) continue;  // a reshape of weights
      PlannedValue& input = layout_.values[source->second];
      int root = input.viewOf >= 0 ? input.viewOf : source->second;
      input.lastUse = std::max(input.lastUse, step);
      if (failed(defineValue(reshape.getResult(), step, layout_.values[root].perSequence, root)))
        return failure();
      continue;
    }
    if (isa<func::ReturnOp, xfmr::WeightOp>(op)) continue;
    if (op.getNumResults() > 0 && isWeightValue(op.getResult(0))) {
      sawWeight(op.getResult(0));
      continue;
    }
    if (failed(addStep(op))) return failure();
  }

  // Outputs stay live to the end.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (auto [i, operand] : llvm::enumerate(ret.getOperands())) {
    auto it = valueIds_.find(operand);
    if (it == valueIds_.end())
      return ret.emitError() << "result " << i << " of @" << func_.getName()
                             << " is not computed by a step";
    layout_.values[it->second].lastUse = static_cast<int>(layout_.steps.size());
    std::string name = i == 0 ? "logits" : "result" + std::to_string(i);
    if (auto named = func_.getResultAttrOfType<StringAttr>(i, "xfmr.name")) name = named.str();
    layout_.outputs.push_back({name, it->second});
  }
  placeValues();
  return std::move(layout_);
}

}  // namespace

FailureOr<EntryLayout> layoutEntry(func::FuncOp func) { return LayoutBuilder(func).build(); }

bool isWeightValue(Value value) {
  Operation* op = value.getDefiningOp();
  if (!op) return false;
  if (isa<xfmr::WeightOp>(op)) return true;
  if (auto concat = dyn_cast<xfmr::ConcatOp>(op))
    return concat.getAxis() == 0 && llvm::all_of(concat.getInputs(), isWeightValue);
  if (auto stack = dyn_cast<xfmr::StackOp>(op)) return llvm::all_of(stack.getInputs(), isWeightValue);
  if (auto quantize = dyn_cast<xfmr::QuantizeOp>(op)) return isWeightValue(quantize.getInput());
  if (auto sparsify = dyn_cast<xfmr::SparsifyOp>(op)) return isWeightValue(sparsify.getInput());
  if (auto slice = dyn_cast<xfmr::SliceOp>(op)) return isWeightValue(slice.getInput());
  if (auto offset = dyn_cast<xfmr::WeightOffsetOp>(op)) return isWeightValue(offset.getInput());
  return false;
}

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

}  // namespace kiln
