//===- ExpandSpecDraft.cpp - LayerSkip self-draft entry --------------------===//
//
// Adds `@draft` beside `@verify`: the target's first K decoder layers, then
// its final norm and LM head, over the same ragged batch of draft trees.
//
//   @draft(<@verify's inputs>) -> logits [N, vocab]
//
// The residual stream entering layer K is found from layer K's KV write
// (the paged_kv_append into k_pool.K, or the rope_kv_write region holding
// it): walking back from it, the first residual_rms_norm region's sum (or a
// plain rms_norm's input) is that stream. Then
//   logits = xfmr.logits(xfmr.rms_norm(x_K, final_norm), lm_head)
// and every op neither on that value's path nor a KV write of a layer < K
// is dropped (layers >= K, the accept). The kept writes put each node's
// keys and values of layers < K into the slots the target's verify forward
// writes for the same token and position, with the same weights: the
// values are the target's own, and verify writes them again.
//
//===----------------------------------------------------------------------===//

#include "compiler/LayerStack.h"
#include "compiler/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <map>

namespace kiln {

#define GEN_PASS_DEF_EXPANDSPECDRAFT
#include "compiler/Passes.h.inc"

namespace {

using namespace mlir;

struct ExpandSpecDraftPass : impl::ExpandSpecDraftBase<ExpandSpecDraftPass> {
  using Base::Base;
  void runOnOperation() override;
};

void ExpandSpecDraftPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto verify = module.lookupSymbol<func::FuncOp>("verify");
  if (!verify || verify.isExternal()) {
    module->emitError() << "xfmr-expand-spec-draft needs the @verify entry "
                           "(run xfmr-expand-spec-verify first; kiln-compile "
                           "--spec-tree)";
    return signalPassFailure();
  }
  if (module.lookupSymbol("draft")) {
    module->emitError() << "module already has a @draft symbol, expected "
                           "xfmr-expand-spec-draft to add it";
    return signalPassFailure();
  }
  func::FuncOp draft = verify.clone();
  draft.setName("draft");
  OpBuilder builder(module.getContext());
  builder.setInsertionPointAfter(verify);
  builder.insert(draft);
  Block& body = draft.getBody().front();

  // The layers: two pool arguments each.
  SmallVector<BlockArgument> pools;
  for (BlockArgument argument : body.getArguments())
    if (isa<xfmr::KvPoolType>(argument.getType())) pools.push_back(argument);
  const int64_t numLayers = int64_t(pools.size()) / 2;
  const int64_t k = layers;
  if (k < 1 || k >= numLayers) {
    module->emitError() << "invalid value " << k
                        << " for layers, expected 1 to " << numLayers - 1
                        << " (the model has " << numLayers
                        << " layers; a draft runs fewer)";
    draft.erase();
    return signalPassFailure();
  }
  const std::map<int64_t, Operation*> writes = kvWritesByLayer(body);
  auto next = writes.find(k);
  if (next == writes.end()) {
    draft.emitError() << "layer " << k
                      << " has no paged KV write to cut the draft at";
    draft.erase();
    return signalPassFailure();
  }

  // x_K: from layer K's write back to the norm that starts the layer.
  Operation* norm = layerInputNorm(next->second);
  Value stream = norm ? streamInto(norm) : Value();
  if (!stream) {
    next->second->emitError() << "no norm found before layer " << k
                              << "'s KV write, expected the layer to start "
                                 "with rms_norm";
    draft.erase();
    return signalPassFailure();
  }

  // The final norm and LM head of @verify's logits, over x_K.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  auto logits = ret.getOperand(0).getDefiningOp<xfmr::LogitsOp>();
  Value normWeight;
  FloatAttr epsilon;
  if (logits) {
    Operation* normOp = logits.getHidden().getDefiningOp();
    if (auto norm = dyn_cast_or_null<xfmr::RmsNormOp>(normOp)) {
      normWeight = norm.getWeight();
      epsilon = norm.getEpsilonAttr();
    } else if (auto region = dyn_cast_or_null<xfmr::FusionRegionOp>(normOp);
               region && region.getKind() == "residual_rms_norm") {
      region.walk([&](xfmr::RmsNormOp inner) { epsilon = inner.getEpsilonAttr(); });
      normWeight = region.getInputs()[2];
    }
  }
  if (!normWeight || !epsilon) {
    verify.emitError() << "@verify's logits do not come from rms_norm then "
                          "xfmr.logits, expected the final norm and LM head";
    draft.erase();
    return signalPassFailure();
  }
  builder.setInsertionPoint(ret);
  // The stream's shape in the type @verify's norm writes: with a wider
  // residual stream (f32 under bf16 activations) the LM head reads the
  // activation type.
  auto normType = RankedTensorType::get(
      cast<RankedTensorType>(stream.getType()).getShape(),
      cast<RankedTensorType>(logits.getHidden().getType()).getElementType());
  Value normed = builder.create<xfmr::RmsNormOp>(logits.getLoc(), normType,
                                                 stream, normWeight, epsilon);
  Value draftLogits = builder.create<xfmr::LogitsOp>(
      logits.getLoc(), logits.getType(), normed, logits.getWeight());
  builder.create<func::ReturnOp>(ret.getLoc(), ValueRange{draftLogits});
  ret.erase();

  // Keep what the logits and the writes of layers < K need; drop the rest
  // (in reverse, so users go before their operands). getBackwardSlice stops
  // at isolated ops (the fusion regions), so the closure is walked here.
  llvm::SmallPtrSet<Operation*, 32> keep;
  auto keepWithSlice = [&](Operation* root) {
    SmallVector<Operation*> work = {root};
    while (!work.empty()) {
      Operation* op = work.pop_back_val();
      if (!keep.insert(op).second) continue;
      for (Value operand : op->getOperands())
        if (Operation* def = operand.getDefiningOp()) work.push_back(def);
    }
  };
  keepWithSlice(body.getTerminator());
  for (auto [layer, op] : writes)
    if (layer < k) keepWithSlice(op);
  SmallVector<Operation*> dead;
  for (Operation& op : body)
    if (!keep.contains(&op)) dead.push_back(&op);
  for (Operation* op : llvm::reverse(dead)) {
    op->dropAllUses();
    op->erase();
  }

  draft.setType(builder.getFunctionType(draft.getArgumentTypes(),
                                        {draftLogits.getType()}));
  draft.setAllResultAttrs(ArrayRef<DictionaryAttr>{builder.getDictionaryAttr(
      builder.getNamedAttr("xfmr.name", builder.getStringAttr("logits")))});
  draft->setAttr("xfmr.spec_draft",
                 builder.getDictionaryAttr(builder.getNamedAttr(
                     "layers", builder.getI64IntegerAttr(k))));
}

}  // namespace
}  // namespace kiln
