//===- XfmrDialect.cpp - xfmr dialect registration -------------------------===//

#include "dialects/xfmr/IR/XfmrDialect.h"

using namespace mlir;
using namespace kiln::xfmr;

#include "dialects/xfmr/IR/XfmrDialect.cpp.inc"

void XfmrDialect::initialize() {
  registerTypes();
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "dialects/xfmr/IR/XfmrOps.cpp.inc"
      >();
}
