//===- InsertQuantization.cpp - weight and KV-cache quantization -----------===//
//
// Weights. Every `xfmr.linear` whose weight is a load-time value (an
// `xfmr.weight`, or a concat of them for merged QKV / gate-up projections)
// becomes an `xfmr.quantized_linear`:
//   - weights already in a GGUF block format (q4_0, q4_1, q8_0, ...) keep
//     that form, whatever `weights` says: the linear only changes its name,
//     no op is added and nothing is re-quantized;
//   - float weights with weights=int8|int4|fp8 get an `xfmr.quantize` of the
//     weight value, giving the quantized tensor and its scales as values.
//     It depends only on `xfmr.weight`s, so the lowering hoists it into
//     load-time weight preparation: the checkpoint is quantized once when
//     it is loaded, the step only runs the quantized GEMM.
//       int8     per output channel, scales [out]        !xfmr.quant<"int8", 0>
//       int4     groups of group-size inputs, [out, in/G] !xfmr.quant<"int4", G>
//       fp8      e4m3 per output channel, scales [out]    !xfmr.quant<"fp8e4m3", 0>
//     An int4 linear whose in-features are not a multiple of the group
//     size stays float, with a warning.
// The embedding table (`xfmr.embed`) and the LM head (`xfmr.logits`) stay as
// they are: the embedding is a row gather, where quantization saves memory
// but no time, and the LM head is a single GEMM whose errors go straight
// into every logit (and with tied embeddings it is the same tensor).
//
// KV cache. kv=f16|bf16|int8|fp8 changes the element type of every
// `!xfmr.kv_pool` of a float type (in function signatures, block arguments
// and fusion regions alike) to bf16, i8 or f8E4M3FN. There is no
// calibration data to fix static scales, so the int8/fp8 pools use dynamic
// scales: `xfmr.paged_kv_append` computes one f32 scale per (token, kv head)
// (absmax / qmax over head_dim) and stores it beside the values in the same
// block, `[num_blocks, kv_heads, page_size]` next to
// `[num_blocks, page_size, kv_heads, head_dim]`; `xfmr.paged_attention`
// reads both. The pool arguments say so with `xfmr.kv_scales =
// "token_head"`, so the runtime sizes the blocks to hold the scales.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

namespace kiln {

#define GEN_PASS_DEF_INSERTQUANTIZATION
#include "compiler/Passes.h.inc"

namespace {

using namespace mlir;

// One of kiln's weight schemes, or none.
struct WeightScheme {
  llvm::StringRef kind;  // "" for weights=none
  unsigned group;        // elements per scale along in-features; 0: per row
};

// True for values fixed at load time: weights and concats of them (merged
// projections). Anything computed from them only is hoisted by the lowering.
bool isLoadTimeValue(Value value) {
  Operation* def = value.getDefiningOp();
  if (!def) return false;
  if (isa<xfmr::WeightOp>(def)) return true;
  if (auto concat = dyn_cast<xfmr::ConcatOp>(def))
    return llvm::all_of(concat.getInputs(), isLoadTimeValue);
  return false;
}

class WeightQuantizer {
 public:
  explicit WeightQuantizer(WeightScheme scheme) : scheme_(scheme) {}

  LogicalResult rewrite(xfmr::LinearOp linear);

 private:
  // quantize(w) once per weight value, placed right after its definition.
  xfmr::QuantizeOp quantizeOnce(Value weight, xfmr::QuantType type);
  // For an sp24 weight: quantizes its kept values as the scheme says and
  // points `weight` at the result, giving the scales; null scales when it
  // stays sp24 (weights=none, or groups that do not fit, with a warning).
  FailureOr<Value> quantizeSparse(xfmr::LinearOp linear, Value& weight);

  WeightScheme scheme_;
  llvm::DenseMap<Value, xfmr::QuantizeOp> quantized_;
};

xfmr::QuantizeOp WeightQuantizer::quantizeOnce(Value weight,
                                               xfmr::QuantType type) {
  auto it = quantized_.find(weight);
  if (it != quantized_.end()) return it->second;
  auto weightType = cast<RankedTensorType>(weight.getType());
  int64_t out = weightType.getDimSize(0), in = weightType.getDimSize(1);
  Type f32 = Float32Type::get(weight.getContext());
  RankedTensorType scalesType =
      scheme_.group == 0
          ? RankedTensorType::get({out}, f32)
          : RankedTensorType::get({out, in / scheme_.group}, f32);
  OpBuilder builder(weight.getContext());
  builder.setInsertionPointAfterValue(weight);
  auto quantize = builder.create<xfmr::QuantizeOp>(
      weight.getLoc(), RankedTensorType::get(weightType.getShape(), type),
      scalesType, weight, /*given_scales=*/Value(),
      builder.getI64IntegerAttr(scheme_.group));
  quantized_[weight] = quantize;
  return quantize;
}

FailureOr<Value> WeightQuantizer::quantizeSparse(xfmr::LinearOp linear, Value& weight) {
  if (scheme_.kind.empty()) return Value();
  if (scheme_.kind == "fp8e4m3") {
    linear.emitError() << "weights=fp8 does not combine with 2:4 sparsity, expected none, int8 or int4";
    return failure();
  }
  int64_t in = cast<RankedTensorType>(weight.getType()).getDimSize(1);
  if (scheme_.group != 0 && (scheme_.group % 64 != 0 || in % scheme_.group != 0)) {
    linear.emitWarning() << "a 2:4 sparse linear's int4 groups must be whole 64-column spans dividing its "
                         << in << " in-features, got group size " << scheme_.group
                         << "; its kept values stay float";
    return Value();
  }
  std::string kind = scheme_.kind.str() + "sp24";
  auto type = xfmr::QuantType::get(linear.getContext(), kind, scheme_.group);
  xfmr::QuantizeOp quantize = quantizeOnce(weight, type);
  weight = quantize.getResult();
  return quantize.getScales();
}

LogicalResult WeightQuantizer::rewrite(xfmr::LinearOp linear) {
  Value weight = linear.getWeight();
  auto weightType = cast<RankedTensorType>(weight.getType());
  Value scales;
  if (auto quant = dyn_cast<xfmr::QuantType>(weightType.getElementType());
      quant && quant.getKind() == "sp24") {
    // linear(x, S : sp24)  ->  quantized_linear(x, S), or with weights=int8|int4
    // quantized_linear(x, q, scales s) with q, s = quantize(S): the kept values
    // are quantized, the metadata stays.
    FailureOr<Value> sparseScales = quantizeSparse(linear, weight);
    if (failed(sparseScales)) return failure();
    scales = *sparseScales;
  } else if (quant) {
    // linear(x, W : gguf block type)  ->  quantized_linear(x, W)
    if (quant.hasSeparateScales()) {
      // linear(x, quantize(w)#0)  ->  quantized_linear(x, q, scales quantize(w)#1)
      auto quantize = weight.getDefiningOp<xfmr::QuantizeOp>();
      if (!quantize)
        return linear.emitError()
               << "linear on a '" << quant.getKind()
               << "' weight whose scales are unknown, expected the weight to "
                  "come from xfmr.quantize";
      scales = quantize.getScales();
    }
  } else {
    if (scheme_.kind.empty() || !isa<FloatType>(weightType.getElementType()) ||
        !isLoadTimeValue(weight))
      return success();
    int64_t in = weightType.getDimSize(1);
    if (scheme_.group != 0 && in % scheme_.group != 0) {
      linear.emitWarning()
          << "in-features " << in << " are not a multiple of group size "
          << scheme_.group << "; this linear stays in "
          << weightType.getElementType();
      return success();
    }
    // linear(x, w : float)  ->  quantized_linear(x, q, scales s) with q, s = quantize(w)
    auto type = xfmr::QuantType::get(linear.getContext(), scheme_.kind,
                                     scheme_.group);
    xfmr::QuantizeOp quantize = quantizeOnce(weight, type);
    weight = quantize.getResult();
    scales = quantize.getScales();
  }
  OpBuilder builder(linear);
  auto replacement = builder.create<xfmr::QuantizedLinearOp>(
      linear.getLoc(), linear.getResult().getType(), linear.getInput(), weight,
      scales, linear.getBias());
  for (NamedAttribute attr : linear->getDiscardableAttrs())
    replacement->setAttr(attr.getName(), attr.getValue());
  linear.getResult().replaceAllUsesWith(replacement.getResult());
  linear.erase();
  return success();
}

// Changes every float kv_pool type to `element` in one function: block
// arguments of all regions (fusion regions pass pools through), op results,
// and the function type. Returns whether any pool was found.
bool convertKvPools(func::FuncOp func, Type element, bool dynamicScales) {
  bool found = false;
  auto convert = [&](Type type) -> Type {
    auto pool = dyn_cast<xfmr::KvPoolType>(type);
    if (!pool) return type;
    found = true;
    if (!isa<FloatType>(pool.getElementType()) ||
        pool.getElementType() == element)
      return type;
    return xfmr::KvPoolType::get(type.getContext(), pool.getPageSize(),
                                 pool.getKvHeads(), pool.getHeadDim(), element);
  };
  func->walk([&](Operation* op) {
    for (Region& region : op->getRegions())
      for (Block& block : region)
        for (BlockArgument argument : block.getArguments())
          argument.setType(convert(argument.getType()));
    for (OpResult result : op->getResults())
      result.setType(convert(result.getType()));
  });
  FunctionType type = func.getFunctionType();
  SmallVector<Type> inputs = llvm::map_to_vector(type.getInputs(), convert);
  SmallVector<Type> results = llvm::map_to_vector(type.getResults(), convert);
  func.setFunctionType(FunctionType::get(func.getContext(), inputs, results));
  if (dynamicScales)
    for (auto [i, input] : llvm::enumerate(inputs))
      if (isa<xfmr::KvPoolType>(input))
        func.setArgAttr(i, "xfmr.kv_scales",
                        StringAttr::get(func.getContext(), "token_head"));
  return found;
}

struct InsertQuantizationPass
    : impl::InsertQuantizationBase<InsertQuantizationPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!llvm::is_contained({"none", "int8", "int4", "fp8"}, weights)) {
      module->emitError() << "invalid value '" << weights
                          << "' for weights, expected one of: none, int8, "
                             "int4, fp8";
      return signalPassFailure();
    }
    unsigned group = groupSize;
    if (group == 0 || group % 32 != 0) {
      module->emitError() << "invalid value '" << group
                          << "' for group-size, expected a positive multiple "
                             "of 32 (32, 64, 128, ...)";
      return signalPassFailure();
    }
    if (Status valid = validateQuantKv(kv, "kv"); !valid.ok()) {
      module->emitError() << valid.error().message;
      return signalPassFailure();
    }

    WeightScheme scheme{"", 0};
    if (weights == "int8") scheme = {"int8", 0};
    if (weights == "int4") scheme = {"int4", group};
    if (weights == "fp8") scheme = {"fp8e4m3", 0};
    WeightQuantizer quantizer(scheme);
    SmallVector<xfmr::LinearOp> linears;
    module.walk([&](xfmr::LinearOp linear) { linears.push_back(linear); });
    for (xfmr::LinearOp linear : linears)
      if (failed(quantizer.rewrite(linear))) return signalPassFailure();

    if (kv == "none") return;
    MLIRContext* context = &getContext();
    Type element = kv == "bf16"   ? Type(BFloat16Type::get(context))
                   : kv == "f16"  ? Type(Float16Type::get(context))
                   : kv == "int8" ? Type(IntegerType::get(context, 8))
                                  : Type(Float8E4M3FNType::get(context));
    const bool half = kv == "bf16" || kv == "f16";  // float types: no scales
    bool found = false;
    for (auto func : module.getOps<func::FuncOp>())
      found |= convertKvPools(func, element, /*dynamicScales=*/!half);
    // Not an error: the weights may still have been quantized.
    if (!found)
      module->emitWarning() << "kv=" << kv
                            << " has no effect: no !xfmr.kv_pool found (run "
                               "xfmr-page-kv-cache first)";
  }
};

}  // namespace
}  // namespace kiln
