//===- SplitPipelineStages.cpp - xfmr-split-pipeline-stages ----------------===//
//
// One pipeline stage of @forward (docs/design/parallelism.md). With L
// attention layers and M stages, stage S keeps layers [S·L/M, (S+1)·L/M):
// integer division, so the stages differ by at most one layer and the
// later ones take the extra (L = 5, M = 2: layers 0-1, then 2-4).
//
// The residual stream entering layer K is found as xfmr-expand-spec-draft
// finds it (LayerStack.h): walking back from layer K's KV write to the
// first residual_rms_norm region (its sum) or plain rms_norm (its input). A stage
// before the last sends the stream entering its end layer and returns
// nothing; a stage after the first receives the stream entering its first
// layer and recomputes that layer's input norm from it:
//
//   residual_rms_norm(x, r, w) -> (s, n)   becomes   s = recv, n = rms_norm(s, w)
//
// Then every op neither on the path of the return, the send, nor a KV
// write of a kept layer is dropped.
//
//===----------------------------------------------------------------------===//

#include "compiler/LayerStack.h"
#include "compiler/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace kiln {

#define GEN_PASS_DEF_SPLITPIPELINESTAGES
#include "compiler/Passes.h.inc"

namespace {

using namespace mlir;

struct SplitPipelineStagesPass : impl::SplitPipelineStagesBase<SplitPipelineStagesPass> {
  using Base::Base;
  void runOnOperation() override;
};

void SplitPipelineStagesPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (size < 1 || stage >= size) {
    module->emitError() << "invalid stage " << int64_t(stage) << " for pipeline size " << int64_t(size)
                        << ", expected a size of at least 1 and a stage below it";
    return signalPassFailure();
  }
  if (size == 1) return;
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  if (!forward || forward.isExternal()) {
    module->emitError() << "xfmr-split-pipeline-stages needs a @forward function, found none";
    return signalPassFailure();
  }
  Block& body = forward.getBody().front();
  SmallVector<BlockArgument> pools;
  for (BlockArgument argument : body.getArguments())
    if (isa<xfmr::KvPoolType>(argument.getType())) pools.push_back(argument);
  const int64_t layers = int64_t(pools.size()) / 2;
  if (layers < int64_t(size)) {
    module->emitError() << "invalid value " << int64_t(size) << " for the pipeline size: the model has " << layers
                        << " paged attention layers, a stage needs at least one (run xfmr-page-kv-cache first)";
    return signalPassFailure();
  }
  const int64_t first = int64_t(stage) * layers / size, end = int64_t(stage + 1) * layers / size;
  const std::map<int64_t, Operation*> writes = kvWritesByLayer(body);
  auto inputNorm = [&](int64_t layer) -> Operation* {
    auto write = writes.find(layer);
    Operation* norm = write == writes.end() ? nullptr : layerInputNorm(write->second);
    if (!norm)
      forward.emitError() << "layer " << layer << " has no paged KV write after an rms_norm to cut the stages at";
    return norm;
  };

  OpBuilder builder(&getContext());
  Operation* send = nullptr;
  if (end < layers) {
    Operation* norm = inputNorm(end);
    if (!norm) return signalPassFailure();
    Value stream = streamInto(norm);
    builder.setInsertionPointAfter(norm);
    send = builder.create<xfmr::SendOp>(norm->getLoc(), stream, builder.getI64IntegerAttr(stage + 1));
  }
  if (first > 0) {
    Operation* norm = inputNorm(first);
    if (!norm) return signalPassFailure();
    Value stream = streamInto(norm);
    builder.setInsertionPointToStart(&body);
    auto recv = builder.create<xfmr::RecvOp>(norm->getLoc(), stream.getType(), builder.getI64IntegerAttr(stage - 1));
    if (auto region = dyn_cast<xfmr::FusionRegionOp>(norm)) {
      FloatAttr epsilon;
      region.walk([&](xfmr::RmsNormOp inner) { epsilon = inner.getEpsilonAttr(); });
      builder.setInsertionPoint(region);
      Value normed = builder.create<xfmr::RmsNormOp>(region.getLoc(), region.getResult(1).getType(), recv,
                                                     region.getInputs()[2], epsilon);
      region.getResult(0).replaceAllUsesWith(recv);
      region.getResult(1).replaceAllUsesWith(normed);
    } else {
      stream.replaceAllUsesWith(recv);
    }
  }
  if (send) {
    // A stage before the last hands its stream on and has no logits.
    Operation* ret = body.getTerminator();
    builder.setInsertionPoint(ret);
    builder.create<func::ReturnOp>(ret->getLoc());
    ret->erase();
    forward.setType(builder.getFunctionType(forward.getArgumentTypes(), {}));
    forward.setAllResultAttrs(ArrayRef<DictionaryAttr>{});
  }

  // Keep the return's, the send's and the kept layers' KV writes' inputs.
  llvm::SmallPtrSet<Operation*, 32> keep;
  auto keepWithInputs = [&](Operation* root) {
    SmallVector<Operation*> work = {root};
    while (!work.empty()) {
      Operation* op = work.pop_back_val();
      if (!keep.insert(op).second) continue;
      for (Value operand : op->getOperands())
        if (Operation* def = operand.getDefiningOp()) work.push_back(def);
    }
  };
  keepWithInputs(body.getTerminator());
  if (send) keepWithInputs(send);
  for (auto [layer, op] : writes)
    if (layer >= first && layer < end) keepWithInputs(op);
  SmallVector<Operation*> dead;
  for (Operation& op : body)
    if (!keep.contains(&op)) dead.push_back(&op);
  for (Operation* op : llvm::reverse(dead)) {
    op->dropAllUses();
    op->erase();
  }
  forward->setAttr("xfmr.pipeline_stage",
                   builder.getDictionaryAttr({builder.getNamedAttr("stage", builder.getI64IntegerAttr(stage)),
                                              builder.getNamedAttr("stages", builder.getI64IntegerAttr(size)),
                                              builder.getNamedAttr("first_layer", builder.getI64IntegerAttr(first)),
                                              builder.getNamedAttr("end_layer", builder.getI64IntegerAttr(end))}));
}

}  // namespace
}  // namespace kiln
