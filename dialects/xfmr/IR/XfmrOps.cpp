//===- XfmrOps.cpp - xfmr op verifiers -------------------------------------===//
//
// Verifier messages give the actual and the expected value, e.g.
//   'xfmr.linear' op weight in-features 512 do not match input last dimension 576
//
//===----------------------------------------------------------------------===//

#include "dialects/xfmr/IR/XfmrDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

using namespace mlir;
using namespace kiln::xfmr;

namespace {

RankedTensorType tensorOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

// Two extents agree when equal or when either is only known at run time.
bool extentsAgree(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

std::string extentString(int64_t extent) {
  return ShapedType::isDynamic(extent) ? "?" : std::to_string(extent);
}

LogicalResult expectRank(Operation* op, llvm::StringRef what,
                         RankedTensorType type, int64_t rank) {
  if (type.getRank() != rank)
    return op->emitOpError() << what << " has rank " << type.getRank()
                             << ", expected " << rank << " (" << type << ")";
  return success();
}

LogicalResult expectExtent(Operation* op, llvm::StringRef what, int64_t actual,
                           int64_t expected) {
  if (!extentsAgree(actual, expected))
    return op->emitOpError() << what << " is " << extentString(actual)
                             << ", expected " << extentString(expected);
  return success();
}

LogicalResult expectSameShape(Operation* op, llvm::StringRef what,
                              RankedTensorType actual,
                              RankedTensorType expected) {
  if (actual.getRank() != expected.getRank())
    return expectRank(op, what, actual, expected.getRank());
  for (int64_t i = 0; i < actual.getRank(); ++i)
    if (!extentsAgree(actual.getDimSize(i), expected.getDimSize(i)))
      return op->emitOpError()
             << what << " dimension " << i << " is "
             << extentString(actual.getDimSize(i)) << ", expected "
             << extentString(expected.getDimSize(i));
  return success();
}

// A sliding window, where an op has one, is a positive number of keys.
LogicalResult verifySlidingWindow(Operation* op, std::optional<uint64_t> window) {
  if (window && (static_cast<int64_t>(*window) <= 0 ||
                 static_cast<int64_t>(*window) > (int64_t{1} << 31) - 1))
    return op->emitOpError() << "sliding_window " << static_cast<int64_t>(*window)
                             << ", expected a positive number of keys (absent: no window)";
  return success();
}

// Shared by linear, quantized_linear and gemm: x [..., in] · W[out, in]ᵀ.
LogicalResult verifyLinearShapes(Operation* op, RankedTensorType input,
                                 RankedTensorType weight,
                                 RankedTensorType result) {
  if (input.getRank() < 1)
    return op->emitOpError() << "input must have rank >= 1, got " << input;
  if (failed(expectRank(op, "weight", weight, 2))) return failure();
  if (failed(expectRank(op, "result", result, input.getRank())))
    return failure();
  int64_t inFeatures = input.getDimSize(input.getRank() - 1);
  if (!extentsAgree(weight.getDimSize(1), inFeatures))
    return op->emitOpError()
           << "weight in-features " << extentString(weight.getDimSize(1))
           << " do not match input last dimension " << extentString(inFeatures);
  for (int64_t i = 0; i + 1 < input.getRank(); ++i)
    if (failed(expectExtent(op, "result dimension " + std::to_string(i),
                            result.getDimSize(i), input.getDimSize(i))))
      return failure();
  return expectExtent(op, "result last dimension",
                      result.getDimSize(result.getRank() - 1),
                      weight.getDimSize(0));
}

LogicalResult verifyBias(Operation* op, Value bias, RankedTensorType weight) {
  if (!bias) return success();
  RankedTensorType biasType = tensorOf(bias);
  if (failed(expectRank(op, "bias", biasType, 1))) return failure();
  return expectExtent(op, "bias length", biasType.getDimSize(0),
                      weight.getDimSize(0));
}

bool isFloatTensor(RankedTensorType type) {
  return isa<FloatType>(type.getElementType());
}

// The element type of `a + b`: the common type, or the wider of two float
// types of different widths; null where neither applies.
Type promotedElementType(Type a, Type b) {
  if (a == b) return a;
  auto fa = dyn_cast<FloatType>(a), fb = dyn_cast<FloatType>(b);
  if (!fa || !fb || fa.getWidth() == fb.getWidth()) return {};
  return fa.getWidth() > fb.getWidth() ? a : b;
}

}  // namespace

// `: T` when lhs, rhs and result share T, else `: (L, R) -> T`.
static ParseResult parsePromotedTypes(OpAsmParser& parser, Type& lhs, Type& rhs,
                                      Type& result) {
  Type type;
  if (parser.parseType(type)) return failure();
  if (auto function = dyn_cast<FunctionType>(type)) {
    if (function.getNumInputs() != 2 || function.getNumResults() != 1)
      return parser.emitError(parser.getCurrentLocation())
             << "expected (lhs type, rhs type) -> result type, got " << type;
    lhs = function.getInput(0);
    rhs = function.getInput(1);
    result = function.getResult(0);
    return success();
  }
  lhs = rhs = result = type;
  return success();
}

static void printPromotedTypes(OpAsmPrinter& printer, Operation*, Type lhs,
                               Type rhs, Type result) {
  if (lhs == rhs && rhs == result)
    printer << lhs;
  else
    printer << FunctionType::get(lhs.getContext(), {lhs, rhs}, {result});
}

//===----------------------------------------------------------------------===//
// Unfused form
//===----------------------------------------------------------------------===//

LogicalResult AddOp::inferReturnTypes(
    MLIRContext*, std::optional<Location> location, ValueRange operands,
    DictionaryAttr, OpaqueProperties, RegionRange,
    llvm::SmallVectorImpl<Type>& inferred) {
  auto lhs = dyn_cast<RankedTensorType>(operands[0].getType());
  auto rhs = dyn_cast<RankedTensorType>(operands[1].getType());
  if (!lhs || !rhs) return emitOptionalError(location, "expected ranked tensors");
  Type element = promotedElementType(lhs.getElementType(), rhs.getElementType());
  if (!element)
    return emitOptionalError(location, "operand element types ",
                             lhs.getElementType(), " and ", rhs.getElementType(),
                             " have no promoted type");
  inferred.push_back(lhs.clone(element));
  return success();
}

LogicalResult AddOp::verify() {
  RankedTensorType lhs = tensorOf(getLhs()), rhs = tensorOf(getRhs());
  RankedTensorType result = tensorOf(getResult());
  if (lhs.getShape() != rhs.getShape() || result.getShape() != lhs.getShape())
    return emitOpError() << "operand and result shapes differ: " << lhs << ", "
                         << rhs << " -> " << result << ", expected one shape";
  Type element = promotedElementType(lhs.getElementType(), rhs.getElementType());
  if (!element)
    return emitOpError() << "operand element types " << lhs.getElementType()
                         << " and " << rhs.getElementType()
                         << " differ, expected equal types or floats of "
                            "different widths";
  if (result.getElementType() != element)
    return emitOpError() << "result element type " << result.getElementType()
                         << ", expected " << element
                         << " (the wider operand element type)";
  return success();
}

LogicalResult WeightOp::verify() {
  if (getName().empty())
    return emitOpError() << "weight name is empty, expected the checkpoint "
                            "tensor name";
  if (!getResult().getType().hasStaticShape())
    return emitOpError() << "weight '" << getName() << "' has type "
                         << getResult().getType()
                         << ", expected a static shape";
  return success();
}

LogicalResult EmbedOp::verify() {
  RankedTensorType tokens = tensorOf(getTokens());
  RankedTensorType table = tensorOf(getTable());
  RankedTensorType result = tensorOf(getResult());
  if (failed(expectRank(*this, "tokens", tokens, 1)) ||
      failed(expectRank(*this, "table", table, 2)) ||
      failed(expectRank(*this, "result", result, 2)))
    return failure();
  if (failed(expectExtent(*this, "result rows", result.getDimSize(0),
                          tokens.getDimSize(0))) ||
      failed(expectExtent(*this, "result hidden size", result.getDimSize(1),
                          table.getDimSize(1))))
    return failure();
  if (!isFloatTensor(result))
    return emitOpError() << "result element type " << result.getElementType()
                         << ", expected a float type";
  if (std::optional<llvm::APFloat> scale = getScale(); scale && !(scale->convertToDouble() > 0))
    return emitOpError() << "scale " << scale->convertToDouble() << ", expected a positive number";
  return success();
}

LogicalResult WeightOffsetOp::verify() {
  if (failed(expectSameShape(*this, "result", tensorOf(getResult()), tensorOf(getInput()))))
    return failure();
  if (!isFloatTensor(tensorOf(getInput())))
    return emitOpError() << "input element type " << tensorOf(getInput()).getElementType()
                         << ", expected a float type";
  return success();
}

LogicalResult RmsNormOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  RankedTensorType weight = tensorOf(getWeight());
  if (failed(expectRank(*this, "weight", weight, 1))) return failure();
  if (input.getRank() < 1)
    return emitOpError() << "input must have rank >= 1, got " << input;
  if (failed(expectExtent(*this, "weight length", weight.getDimSize(0),
                          input.getDimSize(input.getRank() - 1))))
    return failure();
  if (failed(expectSameShape(*this, "result", tensorOf(getResult()), input)))
    return failure();
  if (!(getEpsilon().convertToDouble() > 0))
    return emitOpError() << "epsilon " << getEpsilon().convertToDouble()
                         << " must be > 0";
  return success();
}

LogicalResult LinearOp::verify() {
  RankedTensorType weight = tensorOf(getWeight());
  if (failed(verifyLinearShapes(*this, tensorOf(getInput()), weight,
                                tensorOf(getResult()))))
    return failure();
  return verifyBias(*this, getBias(), weight);
}

LogicalResult RopeOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  RankedTensorType positions = tensorOf(getPositions());
  if (failed(expectRank(*this, "input", input, 3)) ||
      failed(expectRank(*this, "positions", positions, 1)))
    return failure();
  if (failed(expectExtent(*this, "positions length", positions.getDimSize(0),
                          input.getDimSize(0))))
    return failure();
  int64_t headDim = input.getDimSize(2);
  if (!ShapedType::isDynamic(headDim) && headDim % 2 != 0)
    return emitOpError() << "head dimension " << headDim
                         << " is odd, expected an even number";
  return success();
}

LogicalResult ReshapeOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  RankedTensorType result = tensorOf(getResult());
  if (input.getElementType() != result.getElementType())
    return emitOpError() << "result element type " << result.getElementType()
                         << ", expected " << input.getElementType();
  auto staticProduct = [](RankedTensorType type, int& dynamicDims) {
    int64_t product = 1;
    dynamicDims = 0;
    for (int64_t extent : type.getShape()) {
      if (ShapedType::isDynamic(extent))
        ++dynamicDims;
      else
        product *= extent;
    }
    return product;
  };
  int inputDynamic = 0, resultDynamic = 0;
  int64_t inputCount = staticProduct(input, inputDynamic);
  int64_t resultCount = staticProduct(result, resultDynamic);
  if (inputDynamic > 1 || resultDynamic > 1)
    return emitOpError() << "reshape " << input << " -> " << result
                         << " has more than one dynamic dimension on a side, "
                            "expected at most one";
  if (inputDynamic != resultDynamic ||
      (inputDynamic == 0 && inputCount != resultCount) ||
      (inputDynamic == 1 && inputCount != resultCount))
    return emitOpError() << "reshape " << input << " -> " << result
                         << " changes the element count (static parts "
                         << inputCount << " vs " << resultCount
                         << "), expected equal counts";
  return success();
}

LogicalResult TransposeOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  RankedTensorType result = tensorOf(getResult());
  llvm::ArrayRef<int64_t> permutation = getPermutation();
  if (static_cast<int64_t>(permutation.size()) != input.getRank())
    return emitOpError() << "permutation has " << permutation.size()
                         << " entries, expected " << input.getRank();
  if (failed(expectRank(*this, "result", result, input.getRank())))
    return failure();
  llvm::SmallSet<int64_t, 4> seen;
  for (auto [i, from] : llvm::enumerate(permutation)) {
    if (from < 0 || from >= input.getRank() || !seen.insert(from).second)
      return emitOpError() << "permutation entry " << from
                           << " is out of range or repeated, expected a "
                              "permutation of 0.."
                           << input.getRank() - 1;
    if (failed(expectExtent(*this, "result dimension " + std::to_string(i),
                            result.getDimSize(i), input.getDimSize(from))))
      return failure();
  }
  if (input.getElementType() != result.getElementType())
    return emitOpError() << "result element type " << result.getElementType()
                         << ", expected " << input.getElementType();
  return success();
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "has no inputs, expected at least one";
  RankedTensorType result = tensorOf(getResult());
  int64_t axis = getAxis();
  if (axis < 0 || axis >= result.getRank())
    return emitOpError() << "axis " << axis << " is out of range, expected 0.."
                         << result.getRank() - 1;
  int64_t total = 0;
  bool totalKnown = true;
  for (auto [i, input] : llvm::enumerate(getInputs())) {
    RankedTensorType type = tensorOf(input);
    std::string what = "input " + std::to_string(i);
    if (failed(expectRank(*this, what, type, result.getRank())))
      return failure();
    for (int64_t d = 0; d < result.getRank(); ++d) {
      if (d == axis) continue;
      if (failed(expectExtent(*this, what + " dimension " + std::to_string(d),
                              type.getDimSize(d), result.getDimSize(d))))
        return failure();
    }
    if (ShapedType::isDynamic(type.getDimSize(axis)))
      totalKnown = false;
    else
      total += type.getDimSize(axis);
  }
  if (totalKnown)
    return expectExtent(*this, "result concatenated dimension",
                        result.getDimSize(axis), total);
  return success();
}

LogicalResult SplitOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  int64_t axis = getAxis();
  if (axis < 0 || axis >= input.getRank())
    return emitOpError() << "axis " << axis << " is out of range, expected 0.."
                         << input.getRank() - 1;
  llvm::ArrayRef<int64_t> sizes = getSizes();
  if (sizes.size() != getResults().size())
    return emitOpError() << "has " << sizes.size() << " sizes for "
                         << getResults().size() << " results, expected one each";
  int64_t total = 0;
  for (auto [i, result] : llvm::enumerate(getResults())) {
    RankedTensorType type = tensorOf(result);
    std::string what = "result " + std::to_string(i);
    if (failed(expectRank(*this, what, type, input.getRank()))) return failure();
    for (int64_t d = 0; d < input.getRank(); ++d) {
      int64_t expected = d == axis ? sizes[i] : input.getDimSize(d);
      if (failed(expectExtent(*this, what + " dimension " + std::to_string(d),
                              type.getDimSize(d), expected)))
        return failure();
    }
    total += sizes[i];
  }
  return expectExtent(*this, "sum of split sizes", total,
                      input.getDimSize(axis));
}

LogicalResult StackOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "has no inputs, expected at least one";
  RankedTensorType first = tensorOf(getInputs()[0]);
  for (auto [i, input] : llvm::enumerate(getInputs()))
    if (tensorOf(input) != first)
      return emitOpError() << "input " << i << " is " << tensorOf(input)
                           << ", expected input 0's type " << first;
  llvm::SmallVector<int64_t> shape = {int64_t(getInputs().size())};
  llvm::append_range(shape, first.getShape());
  RankedTensorType expected = RankedTensorType::get(shape, first.getElementType());
  if (tensorOf(getResult()) != expected)
    return emitOpError() << "result is " << tensorOf(getResult()) << ", expected " << expected;
  return success();
}

LogicalResult MoeRouterOp::verify() {
  RankedTensorType logits = tensorOf(getRouterLogits());
  RankedTensorType weights = tensorOf(getWeights());
  RankedTensorType experts = tensorOf(getExperts());
  if (failed(expectRank(*this, "router_logits", logits, 2)) ||
      failed(expectRank(*this, "weights", weights, 2)) ||
      failed(expectRank(*this, "experts", experts, 2)))
    return failure();
  int64_t topK = getTopK();
  int64_t numExperts = logits.getDimSize(1);
  if (topK < 1 || (!ShapedType::isDynamic(numExperts) && topK > numExperts))
    return emitOpError() << "top_k " << topK << " is out of range, expected 1.."
                         << extentString(numExperts);
  for (auto [what, type] : {std::pair<const char*, RankedTensorType>{"weights", weights},
                            {"experts", experts}}) {
    if (failed(expectExtent(*this, std::string(what) + " rows", type.getDimSize(0),
                            logits.getDimSize(0))) ||
        failed(expectExtent(*this, std::string(what) + " columns", type.getDimSize(1), topK)))
      return failure();
  }
  if (!isFloatTensor(logits) || !isFloatTensor(weights))
    return emitOpError() << "router_logits and weights must be float tensors";
  return success();
}

LogicalResult MoeFfnOp::verify() {
  RankedTensorType x = tensorOf(getInput());
  RankedTensorType gate = tensorOf(getGate()), up = tensorOf(getUp()), down = tensorOf(getDown());
  if (failed(expectRank(*this, "input", x, 2)) || failed(expectRank(*this, "gate", gate, 3)) ||
      failed(expectRank(*this, "up", up, 3)) || failed(expectRank(*this, "down", down, 3)))
    return failure();
  const int64_t numExperts = gate.getDimSize(0), ffn = gate.getDimSize(1);
  const int64_t hidden = x.getDimSize(1);
  if (failed(expectExtent(*this, "gate hidden", gate.getDimSize(2), hidden)) ||
      failed(expectSameShape(*this, "up", up, gate)) ||
      failed(expectExtent(*this, "down experts", down.getDimSize(0), numExperts)) ||
      failed(expectExtent(*this, "down hidden", down.getDimSize(1), hidden)) ||
      failed(expectExtent(*this, "down ffn", down.getDimSize(2), ffn)))
    return failure();
  RankedTensorType weights = tensorOf(getWeights()), experts = tensorOf(getExperts());
  if (failed(expectRank(*this, "weights", weights, 2)) ||
      failed(expectSameShape(*this, "experts", experts, weights)) ||
      failed(expectExtent(*this, "weights rows", weights.getDimSize(0), x.getDimSize(0))))
    return failure();
  return expectSameShape(*this, "result", tensorOf(getResult()), x);
}

LogicalResult BatchMatmulOp::verify() {
  RankedTensorType lhs = tensorOf(getLhs());
  RankedTensorType rhs = tensorOf(getRhs());
  RankedTensorType result = tensorOf(getResult());
  if (failed(expectRank(*this, "lhs", lhs, 3)) ||
      failed(expectRank(*this, "rhs", rhs, 3)) ||
      failed(expectRank(*this, "result", result, 3)))
    return failure();
  int64_t rhsK = getTransposeRhs() ? rhs.getDimSize(2) : rhs.getDimSize(1);
  int64_t rhsN = getTransposeRhs() ? rhs.getDimSize(1) : rhs.getDimSize(2);
  if (failed(expectExtent(*this, "rhs batch", rhs.getDimSize(0),
                          lhs.getDimSize(0))) ||
      failed(expectExtent(*this, "rhs contraction size", rhsK,
                          lhs.getDimSize(2))) ||
      failed(expectExtent(*this, "result batch", result.getDimSize(0),
                          lhs.getDimSize(0))) ||
      failed(expectExtent(*this, "result rows", result.getDimSize(1),
                          lhs.getDimSize(1))) ||
      failed(expectExtent(*this, "result columns", result.getDimSize(2), rhsN)))
    return failure();
  return success();
}

LogicalResult CausalMaskOp::verify() {
  RankedTensorType scores = tensorOf(getInput());
  if (failed(expectRank(*this, "scores", scores, 3))) return failure();
  int64_t queries = scores.getDimSize(1), keys = scores.getDimSize(2);
  if (!ShapedType::isDynamic(queries) && !ShapedType::isDynamic(keys) &&
      keys < queries)
    return emitOpError() << "scores have " << keys << " keys for " << queries
                         << " queries, expected keys >= queries";
  return verifySlidingWindow(*this, getSlidingWindow());
}

LogicalResult SoftmaxOp::verify() {
  int64_t rank = tensorOf(getInput()).getRank();
  if (getAxis() < 0 || getAxis() >= rank)
    return emitOpError() << "axis " << getAxis()
                         << " is out of range, expected 0.." << rank - 1;
  return success();
}

LogicalResult RepeatKvOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  RankedTensorType result = tensorOf(getResult());
  if (failed(expectRank(*this, "input", input, 3)) ||
      failed(expectRank(*this, "result", result, 3)))
    return failure();
  if (getRepeats() < 1)
    return emitOpError() << "repeats " << getRepeats() << ", expected >= 1";
  int64_t heads = ShapedType::isDynamic(input.getDimSize(0))
                      ? ShapedType::kDynamic
                      : input.getDimSize(0) * getRepeats();
  if (failed(expectExtent(*this, "result heads", result.getDimSize(0), heads)) ||
      failed(expectExtent(*this, "result length", result.getDimSize(1),
                          input.getDimSize(1))) ||
      failed(expectExtent(*this, "result head dimension", result.getDimSize(2),
                          input.getDimSize(2))))
    return failure();
  return success();
}

LogicalResult KvConcatOp::verify() {
  RankedTensorType past = tensorOf(getPast());
  RankedTensorType update = tensorOf(getUpdate());
  RankedTensorType result = tensorOf(getResult());
  if (failed(expectRank(*this, "past", past, 3)) ||
      failed(expectRank(*this, "update", update, 3)) ||
      failed(expectRank(*this, "result", result, 3)))
    return failure();
  for (int64_t d : {1, 2}) {
    std::string name = d == 1 ? "kv heads" : "head dimension";
    if (failed(expectExtent(*this, "update " + name, update.getDimSize(d),
                            past.getDimSize(d))) ||
        failed(expectExtent(*this, "result " + name, result.getDimSize(d),
                            past.getDimSize(d))))
      return failure();
  }
  if (!past.isDynamicDim(0) && !update.isDynamicDim(0))
    return expectExtent(*this, "result length", result.getDimSize(0),
                        past.getDimSize(0) + update.getDimSize(0));
  return success();
}

LogicalResult LogitsOp::verify() {
  RankedTensorType hidden = tensorOf(getHidden());
  RankedTensorType weight = tensorOf(getWeight());
  RankedTensorType result = tensorOf(getResult());
  if (failed(expectRank(*this, "hidden", hidden, 2))) return failure();
  return verifyLinearShapes(*this, hidden, weight, result);
}

//===----------------------------------------------------------------------===//
// Fused form
//===----------------------------------------------------------------------===//

namespace {
// q [S, H, D] against KV heads and head dim from k/v or a pool.
LogicalResult verifyQueryHeads(Operation* op, RankedTensorType query,
                               int64_t kvHeads, int64_t headDim) {
  if (failed(expectExtent(op, "query head dimension", query.getDimSize(2),
                          headDim)))
    return failure();
  int64_t heads = query.getDimSize(1);
  if (!ShapedType::isDynamic(heads) && !ShapedType::isDynamic(kvHeads) &&
      (kvHeads == 0 || heads % kvHeads != 0))
    return op->emitOpError() << "query heads " << heads
                             << " is not a multiple of kv heads " << kvHeads;
  return success();
}
}  // namespace

LogicalResult AttentionOp::verify() {
  RankedTensorType query = tensorOf(getQuery());
  RankedTensorType key = tensorOf(getKey());
  RankedTensorType value = tensorOf(getValue());
  if (failed(expectRank(*this, "query", query, 3)) ||
      failed(expectRank(*this, "key", key, 3)) ||
      failed(expectRank(*this, "value", value, 3)))
    return failure();
  if (failed(expectSameShape(*this, "value", value, key))) return failure();
  if (failed(verifyQueryHeads(*this, query, key.getDimSize(1),
                              key.getDimSize(2))))
    return failure();
  if (!(getScale().convertToDouble() > 0))
    return emitOpError() << "scale " << getScale().convertToDouble()
                         << " must be > 0";
  if (failed(verifySlidingWindow(*this, getSlidingWindow()))) return failure();
  if (getSlidingWindow() && !getCausal())
    return emitOpError() << "sliding_window " << *getSlidingWindow()
                         << " needs causal attention";
  return expectSameShape(*this, "result", tensorOf(getResult()), query);
}

LogicalResult FusionRegionOp::verify() {
  static constexpr llvm::StringLiteral kKinds[] = {
      "residual_rms_norm", "silu_mul", "gelu_tanh_mul", "rope_kv_write", "moe_route"};
  if (!llvm::is_contained(kKinds, getKind()))
    return emitOpError() << "fusion kind '" << getKind()
                         << "', expected one of: residual_rms_norm, "
                            "silu_mul, gelu_tanh_mul, rope_kv_write, moe_route";
  Block& body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError() << "body has " << body.getNumArguments()
                         << " arguments, expected " << getInputs().size()
                         << " (one per input)";
  for (auto [i, argument, input] :
       llvm::enumerate(body.getArguments(), getInputs()))
    if (argument.getType() != input.getType())
      return emitOpError() << "body argument " << i << " has type "
                           << argument.getType() << ", expected "
                           << input.getType();
  auto yield = cast<YieldOp>(body.getTerminator());
  if (yield.getValues().size() != getResults().size())
    return emitOpError() << "body yields " << yield.getValues().size()
                         << " values, expected " << getResults().size();
  for (auto [i, yielded, result] :
       llvm::enumerate(yield.getValues(), getResults()))
    if (yielded.getType() != result.getType())
      return emitOpError() << "yielded value " << i << " has type "
                           << yielded.getType() << ", expected "
                           << result.getType();
  return success();
}

//===----------------------------------------------------------------------===//
// Paged form
//===----------------------------------------------------------------------===//

namespace {
LogicalResult verifyKvAgainstPool(Operation* op, llvm::StringRef what,
                                  RankedTensorType kv, KvPoolType pool) {
  if (failed(expectRank(op, what, kv, 3))) return failure();
  if (failed(expectExtent(op, (what + " kv heads").str(), kv.getDimSize(1),
                          pool.getKvHeads())) ||
      failed(expectExtent(op, (what + " head dimension").str(),
                          kv.getDimSize(2), pool.getHeadDim())))
    return failure();
  return success();
}
}  // namespace

LogicalResult PagedKvAppendOp::verify() {
  auto keyPool = cast<KvPoolType>(getKeyPool().getType());
  auto valuePool = cast<KvPoolType>(getValuePool().getType());
  if (keyPool.getKvHeads() != valuePool.getKvHeads() ||
      keyPool.getHeadDim() != valuePool.getHeadDim() ||
      keyPool.getPageSize() != valuePool.getPageSize())
    return emitOpError() << "value pool " << valuePool
                         << " does not match key pool " << keyPool;
  RankedTensorType key = tensorOf(getKey());
  if (failed(verifyKvAgainstPool(*this, "key", key, keyPool)) ||
      failed(verifyKvAgainstPool(*this, "value", tensorOf(getValue()),
                                 valuePool)))
    return failure();
  RankedTensorType slots = tensorOf(getSlotMapping());
  if (failed(expectRank(*this, "slot_mapping", slots, 1))) return failure();
  return expectExtent(*this, "slot_mapping length", slots.getDimSize(0),
                      key.getDimSize(0));
}

LogicalResult PagedAttentionOp::verify() {
  RankedTensorType query = tensorOf(getQuery());
  auto pool = cast<KvPoolType>(getKeyPool().getType());
  if (getValuePool().getType() != pool)
    return emitOpError() << "value pool " << getValuePool().getType()
                         << " does not match key pool " << pool;
  if (failed(expectRank(*this, "query", query, 3))) return failure();
  if (failed(verifyQueryHeads(*this, query, pool.getKvHeads(),
                              pool.getHeadDim())))
    return failure();
  RankedTensorType tables = tensorOf(getBlockTables());
  RankedTensorType queryStart = tensorOf(getQueryStart());
  RankedTensorType kvLens = tensorOf(getKvLens());
  if (failed(expectRank(*this, "block_tables", tables, 2)) ||
      failed(expectRank(*this, "query_start", queryStart, 1)) ||
      failed(expectRank(*this, "kv_lens", kvLens, 1)))
    return failure();
  if (!kvLens.isDynamicDim(0) &&
      failed(expectExtent(*this, "query_start length",
                          queryStart.getDimSize(0), kvLens.getDimSize(0) + 1)))
    return failure();
  if (failed(expectExtent(*this, "block_tables rows", tables.getDimSize(0),
                          kvLens.getDimSize(0))))
    return failure();
  if (!(getScale().convertToDouble() > 0))
    return emitOpError() << "scale " << getScale().convertToDouble()
                         << " must be > 0";
  if (failed(verifySlidingWindow(*this, getSlidingWindow()))) return failure();
  if (getSlidingWindow() && getTreeMask())
    return emitOpError() << "sliding_window " << *getSlidingWindow()
                         << " with a tree_mask: windowed speculative verify "
                            "is not supported";
  return expectSameShape(*this, "result", tensorOf(getResult()), query);
}

LogicalResult GatherLastTokensOp::verify() {
  RankedTensorType hidden = tensorOf(getHidden());
  RankedTensorType result = tensorOf(getResult());
  RankedTensorType queryStart = tensorOf(getQueryStart());
  if (failed(expectRank(*this, "hidden", hidden, 2)) ||
      failed(expectRank(*this, "result", result, 2)) ||
      failed(expectRank(*this, "query_start", queryStart, 1)))
    return failure();
  if (!queryStart.isDynamicDim(0) &&
      failed(expectExtent(*this, "result rows", result.getDimSize(0),
                          queryStart.getDimSize(0) - 1)))
    return failure();
  return expectExtent(*this, "result hidden size", result.getDimSize(1),
                      hidden.getDimSize(1));
}

//===----------------------------------------------------------------------===//
// Quantized form
//===----------------------------------------------------------------------===//

namespace {
// Scales of a kiln scheme over `data [..., C]`: `[...]` for block 0 (one
// scale per row), `[..., C/block]` otherwise.
LogicalResult verifyScalesShape(Operation* op, RankedTensorType data,
                                RankedTensorType scales, unsigned block) {
  if (!isFloatTensor(scales))
    return op->emitOpError() << "scales element type "
                             << scales.getElementType()
                             << ", expected a float type";
  if (data.getRank() < 1)
    return op->emitOpError() << "quantized data must have rank >= 1, got "
                             << data;
  int64_t rank = data.getRank();
  int64_t columns = data.getDimSize(rank - 1);
  if (block == 0) {
    if (failed(expectRank(op, "scales", scales, rank - 1))) return failure();
  } else {
    if (failed(expectRank(op, "scales", scales, rank))) return failure();
    if (!ShapedType::isDynamic(columns) && columns % block != 0)
      return op->emitOpError() << "last dimension " << columns
                               << " is not a multiple of the block " << block;
    int64_t groups =
        ShapedType::isDynamic(columns) ? ShapedType::kDynamic : columns / block;
    if (failed(expectExtent(op, "scales groups", scales.getDimSize(rank - 1),
                            groups)))
      return failure();
  }
  for (int64_t d = 0; d + 1 < rank; ++d)
    if (failed(expectExtent(op, "scales dimension " + std::to_string(d),
                            scales.getDimSize(d), data.getDimSize(d))))
      return failure();
  return success();
}
}  // namespace

LogicalResult SparsifyOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  RankedTensorType result = tensorOf(getResult());
  auto inputQuant = dyn_cast<QuantType>(input.getElementType());
  if (!isFloatTensor(input) && !(inputQuant && inputQuant.isGgufBlockFormat()))
    return emitOpError() << "input element type " << input.getElementType()
                         << ", expected a float type or a GGUF block type";
  if (input.getRank() != 2)
    return emitOpError() << "input has rank " << input.getRank() << ", expected a weight matrix [out, in]";
  if (getPattern() != "2:4")
    return emitOpError() << "pattern '" << getPattern() << "', expected '2:4'";
  if (getMethod() != "magnitude" && getMethod() != "sparsegpt")
    return emitOpError() << "method '" << getMethod() << "', expected 'magnitude' or 'sparsegpt'";
  auto quant = dyn_cast<QuantType>(result.getElementType());
  if (!quant || quant.getKind() != "sp24")
    return emitOpError() << "result element type " << result.getElementType()
                         << ", expected !xfmr.quant<\"sp24\", 0>";
  if (!input.isDynamicDim(1) && input.getDimSize(1) % 64 != 0)
    return emitOpError() << "in-features " << input.getDimSize(1)
                         << " are not a multiple of 64 (whole 2:4 metadata words of the values' blocks)";
  return expectSameShape(*this, "result", result, input);
}

LogicalResult QuantizeOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  RankedTensorType result = tensorOf(getResult());
  auto quant = dyn_cast<QuantType>(result.getElementType());
  if (!quant)
    return emitOpError() << "result element type " << result.getElementType()
                         << ", expected !xfmr.quant";
  auto inputQuant = dyn_cast<QuantType>(input.getElementType());
  const bool sparseInput = inputQuant && inputQuant.getKind() == "sp24";
  if (quant.isSparse24() != sparseInput || quant.getKind() == "sp24")
    return emitOpError() << "quantizes " << input.getElementType() << " to " << result.getElementType()
                         << ", expected a float input for int8, int4, fp8e4m3 and an sp24 input "
                            "(from xfmr.sparsify) for int8sp24, int4sp24";
  if (!sparseInput && !isFloatTensor(input))
    return emitOpError() << "input element type " << input.getElementType()
                         << ", expected a float type";
  if (quant.isGgufBlockFormat())
    return emitOpError() << "quantization kind '" << quant.getKind()
                         << "' is a GGUF block format, expected one of kiln's "
                            "schemes: int8, int4, fp8e4m3, int8sp24, int4sp24";
  int64_t group = getGroupAttr().getInt();
  if (group < 0 || group != static_cast<int64_t>(quant.getBlock()))
    return emitOpError() << "group " << group
                         << " does not match the quantization block "
                         << quant.getBlock() << " of " << quant;
  if (failed(expectSameShape(*this, "result", result, input))) return failure();
  RankedTensorType scales = tensorOf(getScales());
  if (getGivenScales() && getGivenScales().getType() != scales)
    return emitOpError() << "scales result has type " << scales
                         << ", expected the given scales' type "
                         << getGivenScales().getType();
  return verifyScalesShape(*this, input, scales, quant.getBlock());
}

LogicalResult DequantizeOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  RankedTensorType result = tensorOf(getResult());
  auto quant = dyn_cast<QuantType>(input.getElementType());
  if (!quant)
    return emitOpError() << "input element type " << input.getElementType()
                         << ", expected !xfmr.quant";
  if (!isFloatTensor(result))
    return emitOpError() << "result element type " << result.getElementType()
                         << ", expected a float type";
  if (!quant.hasSeparateScales() && getScales())
    return emitOpError() << "quantization kind '" << quant.getKind()
                         << (quant.isGgufBlockFormat() ? "' stores scales in its blocks"
                                                       : "' has no scales")
                         << ", expected no scales operand";
  if (quant.hasSeparateScales() && !getScales())
    return emitOpError() << "quantization kind '" << quant.getKind()
                         << "' keeps its scales apart, expected a scales "
                            "operand";
  if (failed(expectSameShape(*this, "result", result, input))) return failure();
  if (!getScales()) return success();
  return verifyScalesShape(*this, input, tensorOf(getScales()),
                           quant.getBlock());
}

LogicalResult QuantizedLinearOp::verify() {
  RankedTensorType weight = tensorOf(getWeight());
  auto quant = dyn_cast<QuantType>(weight.getElementType());
  if (!quant)
    return emitOpError() << "weight element type " << weight.getElementType()
                         << ", expected !xfmr.quant";
  if (!quant.hasSeparateScales() && getScales())
    return emitOpError() << "quantization kind '" << quant.getKind()
                         << (quant.isGgufBlockFormat() ? "' stores scales in its blocks"
                                                       : "' has no scales")
                         << ", expected no scales operand";
  if (quant.hasSeparateScales() && !getScales())
    return emitOpError() << "quantization kind '" << quant.getKind()
                         << "' keeps its scales apart, expected a scales "
                            "operand";
  if (failed(verifyLinearShapes(*this, tensorOf(getInput()), weight,
                                tensorOf(getResult()))))
    return failure();
  if (getScales() && failed(verifyScalesShape(*this, weight,
                                              tensorOf(getScales()),
                                              quant.getBlock())))
    return failure();
  return verifyBias(*this, getBias(), weight);
}

//===----------------------------------------------------------------------===//
// Speculative verify
//===----------------------------------------------------------------------===//

namespace {
// parents [N] and query_start [B+1] of a ragged batch of token trees.
LogicalResult verifyTreeOperands(Operation* op, Value parents,
                                 Value queryStart) {
  if (failed(expectRank(op, "parents", tensorOf(parents), 1)) ||
      failed(expectRank(op, "query_start", tensorOf(queryStart), 1)))
    return failure();
  return success();
}

// Number of sequences B from query_start [B+1]; dynamic if unknown.
int64_t sequencesOf(Value queryStart) {
  int64_t length = tensorOf(queryStart).getDimSize(0);
  return ShapedType::isDynamic(length) ? ShapedType::kDynamic : length - 1;
}
}  // namespace

LogicalResult TreePositionsOp::verify() {
  if (failed(verifyTreeOperands(*this, getParents(), getQueryStart())) ||
      failed(expectRank(*this, "base", tensorOf(getBase()), 1)))
    return failure();
  if (failed(expectExtent(*this, "base length",
                          tensorOf(getBase()).getDimSize(0),
                          sequencesOf(getQueryStart()))))
    return failure();
  RankedTensorType result = tensorOf(getResult());
  if (failed(expectRank(*this, "result", result, 1))) return failure();
  return expectExtent(*this, "result length", result.getDimSize(0),
                      tensorOf(getParents()).getDimSize(0));
}

LogicalResult TreeMaskOp::verify() {
  if (failed(verifyTreeOperands(*this, getParents(), getQueryStart())))
    return failure();
  RankedTensorType result = tensorOf(getResult());
  if (failed(expectRank(*this, "result", result, 2))) return failure();
  return expectExtent(*this, "result rows", result.getDimSize(0),
                      tensorOf(getParents()).getDimSize(0));
}

LogicalResult AcceptOp::verify() {
  if (getMode() != "greedy" && getMode() != "rejection")
    return emitOpError() << "mode '" << getMode()
                         << "', expected 'greedy' or 'rejection'";
  if (getMode() == "rejection" && !getDraftProbs())
    return emitOpError() << "rejection mode needs draft_probs, expected a "
                            "[nodes, vocab] operand";
  if (getMode() == "greedy" && getDraftProbs())
    return emitOpError() << "greedy mode takes no draft_probs, expected none";
  if (failed(verifyTreeOperands(*this, getParents(), getQueryStart())))
    return failure();
  RankedTensorType logits = tensorOf(getLogits());
  RankedTensorType tokens = tensorOf(getTokens());
  if (failed(expectRank(*this, "logits", logits, 2)) ||
      failed(expectRank(*this, "tokens", tokens, 1)))
    return failure();
  if (failed(expectExtent(*this, "tokens length", tokens.getDimSize(0),
                          logits.getDimSize(0))) ||
      failed(expectExtent(*this, "parents length",
                          tensorOf(getParents()).getDimSize(0),
                          logits.getDimSize(0))))
    return failure();
  if (getDraftProbs() &&
      failed(expectSameShape(*this, "draft_probs", tensorOf(getDraftProbs()),
                             logits)))
    return failure();
  RankedTensorType accepted = tensorOf(getAccepted());
  RankedTensorType count = tensorOf(getCount());
  int64_t sequences = sequencesOf(getQueryStart());
  if (failed(expectRank(*this, "accepted", accepted, 2)) ||
      failed(expectRank(*this, "count", count, 1)))
    return failure();
  if (failed(expectExtent(*this, "accepted rows", accepted.getDimSize(0),
                          sequences)) ||
      failed(expectExtent(*this, "count length", count.getDimSize(0),
                          sequences)))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Kernel level
//===----------------------------------------------------------------------===//

llvm::ArrayRef<llvm::StringLiteral> KernelOp::knownKinds() {
  static constexpr llvm::StringLiteral kKinds[] = {
      "embedding",      "rms_norm",         "residual_rms_norm", "rope_kv_append",
      "paged_attention", "silu_mul",        "add",               "mul",
      "silu",           "split",            "gather_last_tokens", "tree_positions",
      "tree_mask",      "accept",           "quantize",          "dequantize",
      "moe_router",     "moe_ffn",          "ssm_conv1d",        "selective_scan",
      "ssd_scan",       "ssm_gated_norm",   "kv_append",         "relu_squared",
      "all_reduce",     "send",             "recv"};
  return kKinds;
}

LogicalResult KernelOp::verify() {
  if (!llvm::is_contained(knownKinds(), getKind())) {
    std::string accepted;
    for (llvm::StringLiteral kind : knownKinds())
      accepted += (accepted.empty() ? "" : ", ") + kind.str();
    return emitOpError() << "kernel kind '" << getKind()
                         << "' is not implemented by the backends, expected one of: "
                         << accepted;
  }
  return success();
}

LogicalResult GemmOp::verify() {
  RankedTensorType weight = tensorOf(getWeight());
  if (failed(verifyLinearShapes(*this, tensorOf(getInput()), weight,
                                tensorOf(getResult()))))
    return failure();
  auto quant = dyn_cast<QuantType>(weight.getElementType());
  bool needsScales = quant && quant.hasSeparateScales();
  if (needsScales != static_cast<bool>(getScales()))
    return emitOpError() << "weight element type " << weight.getElementType()
                         << (needsScales ? " keeps its scales apart, expected a "
                                           "scales operand"
                                         : " needs no scales operand, expected "
                                           "none");
  if (getScales() &&
      failed(expectExtent(*this, "scales rows", tensorOf(getScales()).getDimSize(0),
                          weight.getDimSize(0))))
    return failure();
  return verifyBias(*this, getBias(), weight);
}

#define GET_OP_CLASSES
#include "dialects/xfmr/IR/XfmrOps.cpp.inc"
