//===- RaggedBatch.cpp - @forward over a ragged batch ----------------------===//

#include "compiler/RaggedBatch.h"

#include "mlir/IR/Builders.h"

using namespace mlir;

namespace kiln {

BlockArgument findNamedArgument(func::FuncOp func, llvm::StringRef name) {
  for (BlockArgument arg : func.getArguments())
    if (auto attr = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "xfmr.name");
        attr && attr.getValue() == name)
      return arg;
  return nullptr;
}

BlockArgument insertNamedArgument(func::FuncOp func, unsigned index, llvm::StringRef name, Type type) {
  Builder builder(func.getContext());
  func.insertArgument(index, type,
                      builder.getDictionaryAttr(builder.getNamedAttr("xfmr.name", builder.getStringAttr(name))),
                      func.getLoc());
  return func.getArgument(index);
}

LogicalResult returnLastTokenLogits(func::FuncOp func, Value queryStart) {
  Block& entry = func.getBody().front();
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  Value logits = ret.getNumOperands() > 0 ? ret.getOperand(0) : Value();
  auto logitsOp = logits ? logits.getDefiningOp<xfmr::LogitsOp>() : nullptr;
  if (!logitsOp)
    return ret.emitError() << "expected @forward's first result to come from xfmr.logits";
  Value hidden = logitsOp.getHidden();
  Operation* gatherAfter = logitsOp;
  if (auto norm = hidden.getDefiningOp<xfmr::RmsNormOp>()) {
    hidden = norm.getInput();
    gatherAfter = norm;
  }
  OpBuilder builder(func.getContext());
  builder.setInsertionPoint(gatherAfter);
  Value last = builder.create<xfmr::GatherLastTokensOp>(logitsOp.getLoc(), hidden.getType(), hidden, queryStart);
  gatherAfter->replaceUsesOfWith(hidden, last);

  builder.setInsertionPoint(ret);
  builder.create<func::ReturnOp>(ret.getLoc(), ValueRange{logits});
  ret.erase();
  func.setType(builder.getFunctionType(entry.getArgumentTypes(), {logits.getType()}));
  return success();
}

}  // namespace kiln
