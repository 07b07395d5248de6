//===- SelectKernels.cpp - xfmr-select-kernels -----------------------------===//
//
// Per entry: lay it out as the artifact will (codegen/EntryLayout.h), ask
// the CUDA kernel selection (codegen/cuda/kernel_selection.h) which kernels
// may run each step for the target and activation type, and record them on
// the step's op:
//
//   %y = xfmr.gemm %x, %w : ...
//     ->  %y = xfmr.gemm %x, %w {xfmr.variants = [{role = "single_row", ...},
//                                               {role = "cublaslt", rows = array<i64: 9, -1>}]} : ...
//
// The selection reads value ids and arena rows (which fusions are safe), so
// it runs on the layout the writer will write, after the last pass that
// changes the IR's values.
//
//===----------------------------------------------------------------------===//

#include "codegen/EntryLayout.h"
#include "codegen/KernelVariantAttr.h"
#include "codegen/cuda/kernel_selection.h"
#include "compiler/Passes.h"

#include "mlir/IR/Builders.h"

using namespace mlir;

namespace kiln {
#define GEN_PASS_DEF_SELECTKERNELS
#include "compiler/Passes.h.inc"

namespace {

// The layout as the selection reads it (as planEntryOf reads a loaded plan).
// Every step has typed params.
cuda_codegen::PlanEntry planEntryOf(const EntryLayout& layout, const std::string& activationType) {
  cuda_codegen::PlanEntry plan;
  plan.activation_type = activationType;
  for (const PlannedOutput& output : layout.outputs) plan.pinned.insert(output.value);
  for (const PlannedValue& v : layout.values) {
    const PlannedValue& storage = v.viewOf >= 0 ? layout.values[v.viewOf] : v;
    if (v.viewOf >= 0) {
      plan.pinned.insert(v.viewOf);
      plan.views.insert(v.id);
    }
    plan.storage[v.id] = {storage.offset, storage.offset + storage.rowBytes};
  }
  for (const PlannedStep& step : layout.steps) {
    cuda_codegen::PlanStep p;
    p.kind = *parseStepKind(step.kind);
    p.params = *step.typedParams;
    p.instance = step.instance;
    for (const StepOperand& operand : step.operands)
      p.value_args.push_back(operand.kind == StepOperand::Kind::kValue ? operand.valueId : -1);
    p.results.assign(step.results.begin(), step.results.end());
    plan.steps.push_back(std::move(p));
  }
  return plan;
}

struct SelectKernelsPass : impl::SelectKernelsBase<SelectKernelsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (Status valid = validateTarget(target, "target"); !valid.ok()) {
      module.emitError() << valid.error().message;
      return signalPassFailure();
    }
    module->setAttr(kTargetAttrName, StringAttr::get(&getContext(), target));
    for (auto func : module.getOps<func::FuncOp>()) {
      // A second run (another target) replaces the first's choice.
      func.walk([](Operation* op) { op->removeAttr(kVariantsAttrName); });
      if (target == "cpu") continue;
      if (failed(select(func))) return signalPassFailure();
    }
  }

  LogicalResult select(func::FuncOp func) {
    FailureOr<EntryLayout> layout = layoutEntry(func);
    if (failed(layout)) return failure();
    for (const PlannedStep& step : layout->steps)
      if (!step.typedParams) return success();
    auto chosen = cuda_codegen::selectKernels(planEntryOf(*layout, activationType),
                                              {target, activationType});
    if (!chosen.ok()) return func.emitError() << chosen.error().message;
    Builder b(&getContext());
    for (auto [step, variants] : llvm::zip_equal(layout->steps, *chosen)) {
      if (variants.empty()) continue;  // a split: a strided copy, no kernel to choose
      llvm::SmallVector<Attribute> attrs;
      for (const KernelVariant& variant : variants) {
        FailureOr<DictionaryAttr> attr = variantAttr(step.op, variant);
        if (failed(attr)) return failure();
        attrs.push_back(*attr);
      }
      step.op->setAttr(kVariantsAttrName, b.getArrayAttr(attrs));
    }
    return success();
  }
};

}  // namespace
}  // namespace kiln
