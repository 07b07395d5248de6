//===- XfmrParallelOps.cpp - slice, all-reduce, send and recv verifiers ----===//
//
// Shapes of the parallelism ops (XfmrParallelOps.td); messages give the
// actual and the expected value, e.g.
//   'xfmr.slice' op result shape [288, 576], expected [256, 576]
//
//===----------------------------------------------------------------------===//

#include "dialects/xfmr/IR/XfmrDialect.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using namespace kiln::xfmr;

namespace {

std::string shapeText(RankedTensorType type) {
  std::string text = "[";
  for (int64_t i = 0; i < type.getRank(); ++i) {
    if (i) text += ", ";
    text += type.isDynamicDim(i) ? "?" : std::to_string(type.getDimSize(i));
  }
  return text + "]";
}

// An activation handed between ranks: [N, hidden] with a static hidden.
LogicalResult expectActivation(Operation* op, llvm::StringRef what, Type type) {
  auto tensor = cast<RankedTensorType>(type);
  if (tensor.getRank() != 2 || tensor.isDynamicDim(1))
    return op->emitOpError() << what << " shape " << shapeText(tensor)
                             << ", expected an activation [N, hidden] with a static hidden";
  return success();
}

}  // namespace

LogicalResult SliceOp::verify() {
  auto input = cast<RankedTensorType>(getInput().getType());
  auto result = cast<RankedTensorType>(getResult().getType());
  const int64_t axis = getAxis(), offset = getOffset(), size = getSize();
  if (axis < 0 || axis >= input.getRank())
    return emitOpError() << "axis " << axis << ", expected 0 to " << input.getRank() - 1;
  if (input.isDynamicDim(axis))
    return emitOpError() << "input extent along axis " << axis << " is dynamic, expected a weight's static extent";
  if (offset < 0 || size < 1 || offset + size > input.getDimSize(axis))
    return emitOpError() << "entries " << offset << " .. " << offset + size << " along axis " << axis
                         << ", expected within 0 .. " << input.getDimSize(axis);
  if (result.getElementType() != input.getElementType())
    return emitOpError() << "result element type " << result.getElementType() << ", expected "
                         << input.getElementType();
  SmallVector<int64_t> expected(input.getShape());
  expected[axis] = size;
  if (result.getShape() != ArrayRef<int64_t>(expected))
    return emitOpError() << "result shape " << shapeText(result) << ", expected "
                         << shapeText(RankedTensorType::get(expected, input.getElementType()));
  return success();
}

LogicalResult AllReduceOp::verify() {
  if (getGroupSize() < 2)
    return emitOpError() << "group_size " << getGroupSize() << ", expected at least 2 ranks";
  return expectActivation(*this, "input", getInput().getType());
}

LogicalResult SendOp::verify() {
  if (getPeer() < 1)
    return emitOpError() << "peer " << getPeer() << ", expected a later stage (at least 1)";
  return expectActivation(*this, "input", getInput().getType());
}

LogicalResult RecvOp::verify() {
  if (getPeer() < 0)
    return emitOpError() << "peer " << getPeer() << ", expected an earlier stage (at least 0)";
  return expectActivation(*this, "result", getResult().getType());
}
