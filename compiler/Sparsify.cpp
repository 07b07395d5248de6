//===- Sparsify.cpp - xfmr-sparsify: 2:4 structured sparsity ---------------===//
//
// Every `xfmr.linear` whose weight is a load-time value (an `xfmr.weight` or
// a concat of them) reads it through `xfmr.sparsify`, which keeps two weights
// in every group of four input columns (docs/design/sparsity.md). What stays
// dense, and why:
//   - the embedding gather and the LM head (`xfmr.embed`, `xfmr.logits`):
//     not linears; their errors go straight into every token and logit;
//   - a MoE router's linear: a few outputs whose order picks the experts;
//   - linears inside fusion regions (their weights are region arguments);
//   - a linear whose in-features are not a multiple of 64 (the values'
//     32-element blocks and the metadata words need whole 64-column spans),
//     with a warning.
// The op depends on weights alone, so the artifact runs it as load-time
// weight preparation; xfmr-insert-quantization, which runs next, quantizes
// the kept values when --quant-weights asks for it.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

namespace kiln {

#define GEN_PASS_DEF_SPARSIFY
#include "compiler/Passes.h.inc"

namespace {

using namespace mlir;

bool isLoadTimeWeight(Value value) {
  Operation* def = value.getDefiningOp();
  if (!def) return false;
  if (isa<xfmr::WeightOp>(def)) return true;
  if (auto concat = dyn_cast<xfmr::ConcatOp>(def))
    return concat.getAxis() == 0 && llvm::all_of(concat.getInputs(), isLoadTimeWeight);
  return false;
}

bool feedsRouter(xfmr::LinearOp linear) {
  return llvm::any_of(linear.getResult().getUsers(),
                      [](Operation* user) { return isa<xfmr::MoeRouterOp>(user); });
}

bool isSparsifiable(Type element) {
  if (isa<FloatType>(element)) return true;
  auto quant = dyn_cast<xfmr::QuantType>(element);
  return quant && quant.isGgufBlockFormat();
}

struct SparsifyPass : impl::SparsifyBase<SparsifyPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (Status valid = validateSparsity(pattern, method, "pattern", "method"); !valid.ok()) {
      module->emitError() << valid.error().message;
      return signalPassFailure();
    }
    if (pattern == "none") return;

    MLIRContext* context = &getContext();
    auto sp24 = xfmr::QuantType::get(context, "sp24", 0);
    llvm::DenseMap<Value, Value> sparsified;  // weight -> its xfmr.sparsify (merged QKV reads one)
    module.walk([&](xfmr::LinearOp linear) {
      Value weight = linear.getWeight();
      auto type = cast<RankedTensorType>(weight.getType());
      if (!isLoadTimeWeight(weight) || feedsRouter(linear) || type.getRank() != 2 ||
          !isSparsifiable(type.getElementType()))
        return;
      int64_t in = type.getDimSize(1);
      if (in % 64 != 0) {
        linear.emitWarning() << "in-features " << in
                             << " are not a multiple of 64; this linear stays dense";
        return;
      }
      Value& compressed = sparsified[weight];
      if (!compressed) {
        OpBuilder builder(context);
        builder.setInsertionPointAfterValue(weight);
        compressed = builder.create<xfmr::SparsifyOp>(
            weight.getLoc(), RankedTensorType::get(type.getShape(), sp24), weight,
            builder.getStringAttr(pattern), builder.getStringAttr(method));
      }
      linear.getWeightMutable().assign(compressed);
    });
  }
};

}  // namespace
}  // namespace kiln
