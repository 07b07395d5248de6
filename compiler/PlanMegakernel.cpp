//===- PlanMegakernel.cpp - xfmr-plan-megakernel ---------------------------===//
//
// Lays out @forward as the artifact will (codegen/EntryLayout.h), reads it
// as the plan's entry (runtime/artifact/manifest.h) and cuts it into the
// megakernel's tasks with their counters and order
// (runtime/artifact/megakernel_graph.h), recorded on the func:
//
//   func.func @forward(...)
//     ->  func.func @forward(...) attributes {xfmr.megakernel = {max_batch = 8 : i64, tile = 64 : i64,
//                                                                counters = [...], tasks = [...]}}
//
// The graph reads value ids and arena offsets (a task that overwrites rows
// of a value no longer live waits for that value's readers), so the pass
// runs after the last pass that changes the IR's values.
//
//===----------------------------------------------------------------------===//

#include "codegen/EntryLayout.h"
#include "codegen/MegakernelAttr.h"
#include "compiler/Passes.h"
#include "runtime/artifact/megakernel_graph.h"

using namespace mlir;

namespace kiln {
#define GEN_PASS_DEF_PLANMEGAKERNEL
#include "compiler/Passes.h.inc"

namespace {

// A step operand as the plan's arg: what the graph reads of it is the value
// id, or the pool's (layer, role) from its argument's name (k_pool.N,
// v_pool.N, conv_pool.N, ssm_pool.N).
FailureOr<StepArg> argOf(func::FuncOp func, const StepOperand& operand) {
  StepArg arg;
  switch (operand.kind) {
    case StepOperand::Kind::kValue:
      arg.kind = StepArg::Kind::kValue;
      arg.id = operand.valueId;
      return arg;
    case StepOperand::Kind::kWeight: arg.kind = StepArg::Kind::kWeight; return arg;
    case StepOperand::Kind::kArgument: break;
  }
  auto block = cast<BlockArgument>(operand.value);
  auto name = func.getArgAttrOfType<StringAttr>(block.getArgNumber(), "xfmr.name");
  llvm::StringRef role, layer;
  std::tie(role, layer) = name ? name.getValue().split(".") : std::pair<llvm::StringRef, llvm::StringRef>{};
  unsigned index = 0;
  if (!role.consume_back("_pool") || layer.getAsInteger(10, index)) {
    arg.kind = StepArg::Kind::kInput;
    arg.input = name ? name.str() : "";
    return arg;
  }
  arg.layer = int(index);
  if (role == "k" || role == "v") {
    arg.kind = StepArg::Kind::kPool;
    arg.role = role == "k" ? PoolRole::kKey : PoolRole::kValue;
  } else {
    arg.kind = StepArg::Kind::kState;
    arg.state_role = role == "conv" ? StateRole::kConv : StateRole::kSsm;
  }
  return arg;
}

// The layout as the plan's entry: what the graph builder reads of it.
FailureOr<Entry> entryOf(func::FuncOp func, const EntryLayout& layout) {
  Entry entry;
  entry.name = func.getName().str();
  for (const PlannedValue& v : layout.values) {
    EntryValue value;
    value.id = v.id;
    value.rows = v.perSequence ? ValueRows::kSequences
                 : v.type.getRank() > 0 && v.type.isDynamicDim(0) ? ValueRows::kTokens
                                                                  : ValueRows::kFixed;
    value.row_bytes = v.rowBytes;
    if (v.viewOf >= 0) value.view_of = v.viewOf;
    else value.offset = v.offset;
    entry.values.push_back(value);
  }
  entry.bytes_per_token = layout.bytesPerToken;
  for (auto [index, planned] : llvm::enumerate(layout.steps)) {
    std::optional<StepKind> kind = parseStepKind(planned.kind);
    if (!kind || !planned.typedParams)
      return planned.op->emitError() << "cannot cut step " << index << " ('" << planned.kind
                                     << "') into megakernel tasks: its kind is outside the plan schema";
    Step step;
    step.kind = *kind;
    step.params = *planned.typedParams;
    step.instance = planned.instance;
    for (const StepOperand& operand : planned.operands) {
      FailureOr<StepArg> arg = argOf(func, operand);
      if (failed(arg)) return failure();
      step.args.push_back(*arg);
    }
    step.results.assign(planned.results.begin(), planned.results.end());
    entry.steps.push_back(std::move(step));
  }
  return entry;
}

struct PlanMegakernelPass : impl::PlanMegakernelBase<PlanMegakernelPass> {
  using Base::Base;

  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      // The decode entry; verify and draft entries run step by step.
      if (func.getName() != "forward") continue;
      FailureOr<EntryLayout> layout = layoutEntry(func);
      if (failed(layout)) return signalPassFailure();
      FailureOr<Entry> entry = entryOf(func, *layout);
      if (failed(entry)) return signalPassFailure();
      Result<MegakernelPlan> plan = planMegakernel(*entry, {.max_batch = maxBatch, .tile = tile});
      if (!plan.ok()) {
        func.emitError() << plan.error().message;
        return signalPassFailure();
      }
      func->setAttr(kMegakernelAttrName, megakernelAttr(&getContext(), *plan));
    }
  }
};

}  // namespace
}  // namespace kiln
