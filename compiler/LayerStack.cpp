//===- LayerStack.cpp - finding a paged entry's decoder layers -------------===//

#include "compiler/LayerStack.h"

#include "dialects/xfmr/IR/XfmrDialect.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <deque>

namespace kiln {

using namespace mlir;

namespace {

bool writesKv(Operation* op) {
  if (isa<xfmr::PagedKvAppendOp>(op)) return true;
  bool found = false;
  if (isa<xfmr::FusionRegionOp>(op)) op->walk([&](xfmr::PagedKvAppendOp) { found = true; });
  return found;
}

}  // namespace

std::map<int64_t, Operation*> kvWritesByLayer(Block& body) {
  SmallVector<BlockArgument> pools;
  for (BlockArgument argument : body.getArguments())
    if (isa<xfmr::KvPoolType>(argument.getType())) pools.push_back(argument);
  std::map<int64_t, Operation*> writes;
  for (Operation& op : body.without_terminator()) {
    if (!writesKv(&op)) continue;
    for (Value operand : op.getOperands())
      if (auto* it = llvm::find(pools, operand); it != pools.end()) {
        writes[(it - pools.begin()) / 2] = &op;
        break;
      }
  }
  return writes;
}

Operation* layerInputNorm(Operation* kvWrite) {
  std::deque<Operation*> queue = {kvWrite};
  llvm::SmallPtrSet<Operation*, 16> seen;
  while (!queue.empty()) {
    Operation* op = queue.front();
    queue.pop_front();
    for (Value operand : op->getOperands()) {
      Operation* def = operand.getDefiningOp();
      if (!def || !seen.insert(def).second) continue;
      auto region = dyn_cast<xfmr::FusionRegionOp>(def);
      if ((region && region.getKind() == "residual_rms_norm") || isa<xfmr::RmsNormOp>(def)) return def;
      queue.push_back(def);
    }
  }
  return nullptr;
}

Value streamInto(Operation* norm) {
  if (auto plain = dyn_cast<xfmr::RmsNormOp>(norm)) return plain.getInput();
  return norm->getResult(0);
}

}  // namespace kiln
