//===- XfmrSsmOps.cpp - state-space op verifiers ---------------------------===//
//
// Shapes of the Mamba ops (XfmrSsmOps.td); messages give the actual and the
// expected value, e.g.
//   'xfmr.ssd_scan' op past heads is 4, expected 8
//
//===----------------------------------------------------------------------===//

#include "dialects/xfmr/IR/XfmrDialect.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace kiln::xfmr;

namespace {

RankedTensorType typeOf(Value value) { return cast<RankedTensorType>(value.getType()); }

std::string extent(int64_t e) { return ShapedType::isDynamic(e) ? "?" : std::to_string(e); }

// Checks rank and each static extent of `value` against `expected` (kDynamic: any).
LogicalResult expectShape(Operation* op, llvm::StringRef what, Value value,
                          llvm::ArrayRef<int64_t> expected, llvm::ArrayRef<llvm::StringRef> dims) {
  RankedTensorType type = typeOf(value);
  if (type.getRank() != int64_t(expected.size()))
    return op->emitOpError() << what << " has rank " << type.getRank() << ", expected " << expected.size() << " ("
                             << type << ")";
  for (size_t i = 0; i < expected.size(); ++i) {
    int64_t actual = type.getDimSize(i);
    if (ShapedType::isDynamic(actual) || ShapedType::isDynamic(expected[i]) || actual == expected[i]) continue;
    return op->emitOpError() << what << " " << dims[i] << " is " << extent(actual) << ", expected "
                             << extent(expected[i]);
  }
  return success();
}

LogicalResult expectF32(Operation* op, llvm::StringRef what, Value value) {
  if (!typeOf(value).getElementType().isF32())
    return op->emitOpError() << what << " has element type " << typeOf(value).getElementType()
                             << ", expected f32 (the carried state stays in f32)";
  return success();
}

}  // namespace

LogicalResult CausalConv1dOp::verify() {
  RankedTensorType input = typeOf(getInput()), weight = typeOf(getWeight());
  if (input.getRank() != 2) return emitOpError() << "input has rank " << input.getRank() << ", expected 2";
  if (weight.getRank() != 3)
    return emitOpError() << "weight has rank " << weight.getRank() << ", expected 3 ([C, 1, K])";
  const int64_t channels = input.getDimSize(1), width = weight.getDimSize(2);
  if (ShapedType::isDynamic(width) || width < 2)
    return emitOpError() << "weight width is " << extent(width) << ", expected a static width of at least 2";
  if (failed(expectShape(*this, "weight", getWeight(), {channels, 1, width}, {"channels", "group size", "width"})) ||
      failed(expectShape(*this, "past", getPast(), {width - 1, channels}, {"rows", "channels"})) ||
      failed(expectShape(*this, "present", getPresent(), {width - 1, channels}, {"rows", "channels"})) ||
      failed(expectShape(*this, "result", getResult(), {input.getDimSize(0), channels}, {"rows", "channels"})))
    return failure();
  if (getBias() && failed(expectShape(*this, "bias", getBias(), {channels}, {"channels"}))) return failure();
  if (getActivation() != "silu" && getActivation() != "none")
    return emitOpError() << "activation is '" << getActivation() << "', expected 'silu' or 'none'";
  return success();
}

LogicalResult SelectiveScanOp::verify() {
  RankedTensorType x = typeOf(getX()), aLog = typeOf(getALog());
  if (x.getRank() != 2 || aLog.getRank() != 2)
    return emitOpError() << "x and a_log have ranks " << x.getRank() << " and " << aLog.getRank()
                         << ", expected 2 ([S, I], [I, N])";
  const int64_t tokens = x.getDimSize(0), channels = x.getDimSize(1), state = aLog.getDimSize(1);
  if (failed(expectShape(*this, "dt", getDt(), {tokens, channels}, {"rows", "channels"})) ||
      failed(expectShape(*this, "a_log", getALog(), {channels, state}, {"channels", "state size"})) ||
      failed(expectShape(*this, "b", getB(), {tokens, state}, {"rows", "state size"})) ||
      failed(expectShape(*this, "c", getC(), {tokens, state}, {"rows", "state size"})) ||
      failed(expectShape(*this, "d", getD(), {channels}, {"channels"})) ||
      failed(expectShape(*this, "past", getPast(), {channels, state}, {"channels", "state size"})) ||
      failed(expectShape(*this, "present", getPresent(), {channels, state}, {"channels", "state size"})) ||
      failed(expectShape(*this, "result", getResult(), {tokens, channels}, {"rows", "channels"})))
    return failure();
  return success(succeeded(expectF32(*this, "past", getPast())) && succeeded(expectF32(*this, "present", getPresent())));
}

LogicalResult SsdScanOp::verify() {
  RankedTensorType x = typeOf(getX()), b = typeOf(getB());
  if (x.getRank() != 3 || b.getRank() != 3)
    return emitOpError() << "x and b have ranks " << x.getRank() << " and " << b.getRank()
                         << ", expected 3 ([S, H, P], [S, G, N])";
  const int64_t tokens = x.getDimSize(0), heads = x.getDimSize(1), headDim = x.getDimSize(2);
  const int64_t groups = b.getDimSize(1), state = b.getDimSize(2);
  if (!ShapedType::isDynamic(heads) && !ShapedType::isDynamic(groups) && (groups <= 0 || heads % groups != 0))
    return emitOpError() << "b groups is " << groups << ", expected a divisor of the " << heads << " heads";
  if (failed(expectShape(*this, "dt", getDt(), {tokens, heads}, {"rows", "heads"})) ||
      failed(expectShape(*this, "dt_bias", getDtBias(), {heads}, {"heads"})) ||
      failed(expectShape(*this, "a_log", getALog(), {heads}, {"heads"})) ||
      failed(expectShape(*this, "b", getB(), {tokens, groups, state}, {"rows", "groups", "state size"})) ||
      failed(expectShape(*this, "c", getC(), {tokens, groups, state}, {"rows", "groups", "state size"})) ||
      failed(expectShape(*this, "d", getD(), {heads}, {"heads"})) ||
      failed(expectShape(*this, "past", getPast(), {heads, headDim, state}, {"heads", "head dim", "state size"})) ||
      failed(expectShape(*this, "present", getPresent(), {heads, headDim, state},
                         {"heads", "head dim", "state size"})) ||
      failed(expectShape(*this, "result", getResult(), {tokens, heads, headDim}, {"rows", "heads", "head dim"})))
    return failure();
  if (getChunkSize() <= 0) return emitOpError() << "chunk_size is " << getChunkSize() << ", expected a positive length";
  if (!(getDtMin().convertToDouble() >= 0) || !(getDtMax().convertToDouble() > getDtMin().convertToDouble()))
    return emitOpError() << "dt limits are [" << getDtMin().convertToDouble() << ", "
                         << getDtMax().convertToDouble() << "], expected 0 <= dt_min < dt_max";
  return success(succeeded(expectF32(*this, "past", getPast())) && succeeded(expectF32(*this, "present", getPresent())));
}

LogicalResult GatedRmsNormOp::verify() {
  RankedTensorType input = typeOf(getInput());
  if (input.getRank() != 2) return emitOpError() << "input has rank " << input.getRank() << ", expected 2";
  const int64_t features = input.getDimSize(1);
  if (failed(expectShape(*this, "gate", getGate(), {input.getDimSize(0), features}, {"rows", "features"})) ||
      failed(expectShape(*this, "weight", getWeight(), {features}, {"features"})) ||
      failed(expectShape(*this, "result", getResult(), {input.getDimSize(0), features}, {"rows", "features"})))
    return failure();
  const int64_t group = getGroupSize();
  if (group <= 0 || (!ShapedType::isDynamic(features) && features % group != 0))
    return emitOpError() << "group_size is " << group << ", expected a positive divisor of " << extent(features);
  if (!(getEpsilon().convertToDouble() > 0))
    return emitOpError() << "epsilon is " << getEpsilon().convertToDouble() << ", expected a positive number";
  return success();
}

namespace {

// A pool's slot shape against what the op's other operands give it.
LogicalResult expectSlot(Operation* op, StatePoolType pool, llvm::ArrayRef<int64_t> expected, bool f32) {
  llvm::ArrayRef<int64_t> actual = pool.getSlotShape();
  bool same = actual.size() == expected.size();
  for (size_t i = 0; same && i < expected.size(); ++i)
    same = ShapedType::isDynamic(expected[i]) || actual[i] == expected[i];
  if (!same) {
    std::string want;
    for (int64_t e : expected) want += (want.empty() ? "" : ", ") + extent(e);
    return op->emitOpError() << "pool " << pool << " has the wrong slot shape, expected [" << want << "]";
  }
  if (f32 && !pool.getElementType().isF32())
    return op->emitOpError() << "pool " << pool << " holds " << pool.getElementType()
                             << ", expected f32 (the carried state stays in f32)";
  return success();
}

}  // namespace

LogicalResult PooledCausalConv1dOp::verify() {
  RankedTensorType input = typeOf(getInput()), weight = typeOf(getWeight());
  if (input.getRank() != 2 || weight.getRank() != 3)
    return emitOpError() << "input and weight have ranks " << input.getRank() << " and " << weight.getRank()
                         << ", expected 2 and 3 ([N, C], [C, 1, K])";
  const int64_t channels = input.getDimSize(1), width = weight.getDimSize(2);
  if (ShapedType::isDynamic(width) || width < 2)
    return emitOpError() << "weight width is " << extent(width) << ", expected a static width of at least 2";
  if (failed(expectShape(*this, "weight", getWeight(), {channels, 1, width}, {"channels", "group size", "width"})) ||
      failed(expectShape(*this, "result", getResult(), {input.getDimSize(0), channels}, {"rows", "channels"})) ||
      failed(expectSlot(*this, getPool().getType(), {width - 1, channels}, false)))
    return failure();
  if (getBias() && failed(expectShape(*this, "bias", getBias(), {channels}, {"channels"}))) return failure();
  if (getActivation() != "silu" && getActivation() != "none")
    return emitOpError() << "activation is '" << getActivation() << "', expected 'silu' or 'none'";
  return success();
}

LogicalResult PooledSelectiveScanOp::verify() {
  RankedTensorType x = typeOf(getX()), aLog = typeOf(getALog());
  if (x.getRank() != 2 || aLog.getRank() != 2)
    return emitOpError() << "x and a_log have ranks " << x.getRank() << " and " << aLog.getRank()
                         << ", expected 2 ([N, I], [I, N])";
  const int64_t tokens = x.getDimSize(0), channels = x.getDimSize(1), state = aLog.getDimSize(1);
  if (failed(expectShape(*this, "dt", getDt(), {tokens, channels}, {"rows", "channels"})) ||
      failed(expectShape(*this, "b", getB(), {tokens, state}, {"rows", "state size"})) ||
      failed(expectShape(*this, "c", getC(), {tokens, state}, {"rows", "state size"})) ||
      failed(expectShape(*this, "d", getD(), {channels}, {"channels"})) ||
      failed(expectShape(*this, "result", getResult(), {tokens, channels}, {"rows", "channels"})))
    return failure();
  return expectSlot(*this, getPool().getType(), {channels, state}, true);
}

LogicalResult PooledSsdScanOp::verify() {
  RankedTensorType x = typeOf(getX()), b = typeOf(getB());
  if (x.getRank() != 3 || b.getRank() != 3)
    return emitOpError() << "x and b have ranks " << x.getRank() << " and " << b.getRank()
                         << ", expected 3 ([N, H, P], [N, G, N])";
  const int64_t tokens = x.getDimSize(0), heads = x.getDimSize(1), headDim = x.getDimSize(2);
  const int64_t groups = b.getDimSize(1), state = b.getDimSize(2);
  if (!ShapedType::isDynamic(heads) && !ShapedType::isDynamic(groups) && (groups <= 0 || heads % groups != 0))
    return emitOpError() << "b groups is " << groups << ", expected a divisor of the " << heads << " heads";
  if (failed(expectShape(*this, "dt", getDt(), {tokens, heads}, {"rows", "heads"})) ||
      failed(expectShape(*this, "c", getC(), {tokens, groups, state}, {"rows", "groups", "state size"})) ||
      failed(expectShape(*this, "result", getResult(), {tokens, heads, headDim}, {"rows", "heads", "head dim"})))
    return failure();
  if (getChunkSize() <= 0) return emitOpError() << "chunk_size is " << getChunkSize() << ", expected a positive length";
  return expectSlot(*this, getPool().getType(), {heads, headDim, state}, true);
}
