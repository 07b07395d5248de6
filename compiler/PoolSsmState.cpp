//===- PoolSsmState.cpp - xfmr-pool-ssm-state ------------------------------===//
//
// @forward(tokens, positions, ..., past_conv.i, past_ssm.i, ...) -> (logits, present...)
//   becomes
// @forward(tokens, positions, [paged-KV args,] query_start, state_slots,
//          ..., conv_pool.i, ssm_pool.i, ...) -> logits of each sequence's last token
//
// Per state-space layer i (numbered over those layers alone):
//   causal_conv1d(u, past_conv.i, w)  ->  pooled_causal_conv1d(u, conv_pool.i, w, query_start, state_slots)
//   selective_scan / ssd_scan(..., past_ssm.i)
//                                     ->  pooled_*(..., ssm_pool.i, query_start, state_slots)
// conv_pool.i is !xfmr.state_pool<[K-1, C], activation type>, ssm_pool.i
// !xfmr.state_pool<[I, N] | [H, P, N], f32>. No block tables: a sequence's
// state is one slot whatever its length.
//
//===----------------------------------------------------------------------===//

#include "compiler/FusionRegions.h"
#include "compiler/Passes.h"
#include "compiler/RaggedBatch.h"

#include "mlir/IR/Builders.h"

using namespace mlir;

namespace kiln {
#define GEN_PASS_DEF_POOLSSMSTATE
#include "compiler/Passes.h.inc"

namespace {

constexpr int64_t kDynamic = ShapedType::kDynamic;

struct PoolSsmStatePass : impl::PoolSsmStateBase<PoolSsmStatePass> {
  using Base::Base;

  void runOnOperation() override {
    auto forward = getOperation().lookupSymbol<func::FuncOp>("forward");
    if (!forward) {
      getOperation().emitError() << "xfmr-pool-ssm-state needs a @forward function, found none";
      return signalPassFailure();
    }
    if (failed(pool(forward))) signalPassFailure();
  }

  LogicalResult pool(func::FuncOp forward);
};

// The @forward argument `past` is, or an error at `op`.
FailureOr<BlockArgument> pastArgument(Operation* op, Value past, func::FuncOp forward) {
  auto argument = dyn_cast<BlockArgument>(past);
  if (!argument || argument.getOwner() != &forward.getBody().front())
    return op->emitError() << "xfmr-pool-ssm-state expects the carried state of '" << op->getName()
                           << "' to be a @forward argument (past_conv.i / past_ssm.i)";
  if (!argument.hasOneUse())
    return op->emitError() << "xfmr-pool-ssm-state expects @forward argument " << argument.getArgNumber()
                           << " to be read by this op alone";
  return argument;
}

// Turns the argument into layer `layer`'s pool named `role`.`layer`.
void makePool(func::FuncOp forward, BlockArgument argument, llvm::StringRef role, int layer) {
  auto state = cast<RankedTensorType>(argument.getType());
  argument.setType(xfmr::StatePoolType::get(forward.getContext(), state.getShape(), state.getElementType()));
  forward.setArgAttr(argument.getArgNumber(), "xfmr.name",
                     StringAttr::get(forward.getContext(), role + "." + std::to_string(layer)));
}

LogicalResult PoolSsmStatePass::pool(func::FuncOp forward) {
  llvm::SmallVector<xfmr::CausalConv1dOp> convs;
  llvm::SmallVector<Operation*> scans;
  bool pooled = false;
  forward.walk([&](Operation* op) {
    if (auto conv = dyn_cast<xfmr::CausalConv1dOp>(op)) convs.push_back(conv);
    if (isa<xfmr::SelectiveScanOp, xfmr::SsdScanOp>(op)) scans.push_back(op);
    if (isa<xfmr::PooledCausalConv1dOp, xfmr::PooledSelectiveScanOp, xfmr::PooledSsdScanOp>(op)) pooled = true;
  });
  // Attention-only models, or pooled already: nothing to do (idempotent).
  if (convs.empty() && scans.empty()) return success();
  if (pooled)
    return forward.emitError() << "xfmr-pool-ssm-state found pooled and unpooled state-space ops in one @forward";
  // Preconditions first, so a failure changes nothing.
  for (xfmr::CausalConv1dOp conv : convs)
    if (failed(pastArgument(conv, conv.getPast(), forward))) return failure();
  for (Operation* scan : scans)
    if (failed(pastArgument(scan, scan->getOperand(scan->getNumOperands() - 1), forward))) return failure();
  if (convs.size() != scans.size())
    return forward.emitError() << "xfmr-pool-ssm-state found " << convs.size() << " causal_conv1d and "
                               << scans.size() << " scans, expected one of each per state-space layer";

  dissolveFusionRegions(forward);
  MLIRContext* context = &getContext();
  OpBuilder builder(context);
  auto vector = RankedTensorType::get({kDynamic}, builder.getI32Type());

  // The ragged batch: xfmr-page-kv-cache's query_start when attention layers
  // made it, else a new one after tokens and positions; state_slots after it.
  BlockArgument queryStart = findNamedArgument(forward, "query_start");
  if (!queryStart) queryStart = insertNamedArgument(forward, 2, "query_start", vector);
  BlockArgument slots = insertNamedArgument(forward, queryStart.getArgNumber() + 1, "state_slots", vector);

  // Sample each sequence's last token only (done already with attention).
  if (forward.getNumResults() > 1 && failed(returnLastTokenLogits(forward, queryStart))) return failure();

  for (auto [layer, conv] : llvm::enumerate(convs)) {
    BlockArgument past = cast<BlockArgument>(conv.getPast());
    makePool(forward, past, "conv_pool", int(layer));
    builder.setInsertionPoint(conv);
    Value y = builder.create<xfmr::PooledCausalConv1dOp>(conv.getLoc(), conv.getResult().getType(), conv.getInput(),
                                                         past, conv.getWeight(), queryStart, slots, conv.getBias(),
                                                         conv.getActivationAttr());
    conv.getResult().replaceAllUsesWith(y);
    if (!conv.getPresent().use_empty())
      return conv.emitError() << "xfmr-pool-ssm-state expects the conv's present state to be unused once "
                                 "@forward returns logits alone";
    conv.erase();
  }
  for (auto [layer, op] : llvm::enumerate(scans)) {
    builder.setInsertionPoint(op);
    Value y;
    if (auto scan = dyn_cast<xfmr::SelectiveScanOp>(op)) {
      BlockArgument past = cast<BlockArgument>(scan.getPast());
      makePool(forward, past, "ssm_pool", int(layer));
      y = builder.create<xfmr::PooledSelectiveScanOp>(scan.getLoc(), scan.getResult().getType(), scan.getX(),
                                                      scan.getDt(), scan.getALog(), scan.getB(), scan.getC(),
                                                      scan.getD(), past, queryStart, slots);
    } else {
      auto ssd = cast<xfmr::SsdScanOp>(op);
      BlockArgument past = cast<BlockArgument>(ssd.getPast());
      makePool(forward, past, "ssm_pool", int(layer));
      y = builder.create<xfmr::PooledSsdScanOp>(ssd.getLoc(), ssd.getResult().getType(), ssd.getX(), ssd.getDt(),
                                                ssd.getDtBias(), ssd.getALog(), ssd.getB(), ssd.getC(), ssd.getD(),
                                                past, queryStart, slots, ssd.getChunkSizeAttr(), ssd.getDtMinAttr(),
                                                ssd.getDtMaxAttr());
    }
    op->getResult(0).replaceAllUsesWith(y);
    if (!op->getResult(1).use_empty())
      return op->emitError() << "xfmr-pool-ssm-state expects the scan's present state to be unused once "
                                "@forward returns logits alone";
    op->erase();
  }
  forward.setType(builder.getFunctionType(forward.getBody().front().getArgumentTypes(), forward.getResultTypes()));
  formFusionRegions(forward);
  return success();
}

}  // namespace
}  // namespace kiln
