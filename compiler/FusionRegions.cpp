//===- FusionRegions.cpp - forming and dissolving fusion regions -----------===//

#include "compiler/FusionRegions.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;

namespace kiln {

xfmr::FusionRegionOp outlineFusionRegion(llvm::StringRef kind,
                                         llvm::ArrayRef<Operation*> ops) {
  if (ops.empty()) return nullptr;
  llvm::SmallPtrSet<Operation*, 8> inside(ops.begin(), ops.end());
  Operation* last = ops.back();
  Block* block = last->getBlock();

  llvm::SetVector<Value> inputs;
  llvm::SmallVector<Value> outputs;
  for (Operation* op : ops) {
    if (op->getBlock() != block) return nullptr;
    for (Value operand : op->getOperands())
      if (!inside.contains(operand.getDefiningOp())) inputs.insert(operand);
    for (Value result : op->getResults()) {
      bool usedOutside = false;
      for (Operation* user : result.getUsers()) {
        if (inside.contains(user)) continue;
        // The region replaces `last`; an outside user before it would then
        // read a value defined after it.
        Operation* userInBlock = block->findAncestorOpInBlock(*user);
        if (!userInBlock || userInBlock->isBeforeInBlock(last)) return nullptr;
        usedOutside = true;
      }
      if (usedOutside) outputs.push_back(result);
    }
  }

  OpBuilder builder(last);
  llvm::SmallVector<Type> resultTypes;
  for (Value output : outputs) resultTypes.push_back(output.getType());
  auto region = builder.create<xfmr::FusionRegionOp>(
      last->getLoc(), resultTypes, builder.getStringAttr(kind),
      inputs.getArrayRef());
  Block* body = builder.createBlock(&region.getBody());
  IRMapping mapping;
  for (Value input : inputs)
    mapping.map(input, body->addArgument(input.getType(), input.getLoc()));
  for (Operation* op : ops) builder.clone(*op, mapping);
  llvm::SmallVector<Value> yielded;
  for (Value output : outputs) yielded.push_back(mapping.lookup(output));
  builder.create<xfmr::YieldOp>(last->getLoc(), yielded);

  for (auto [output, result] : llvm::zip(outputs, region.getResults()))
    output.replaceUsesWithIf(result, [&](OpOperand& use) {
      return !inside.contains(use.getOwner());
    });
  for (Operation* op : llvm::reverse(ops)) op->erase();
  return region;
}

void dissolveFusionRegions(func::FuncOp func) {
  llvm::SmallVector<xfmr::FusionRegionOp> regions;
  func.walk([&](xfmr::FusionRegionOp region) { regions.push_back(region); });
  for (xfmr::FusionRegionOp region : regions) {
    OpBuilder builder(region);
    IRMapping mapping;
    Block& body = region.getBody().front();
    for (auto [argument, input] :
         llvm::zip(body.getArguments(), region.getInputs()))
      mapping.map(argument, input);
    for (Operation& op : body.without_terminator()) builder.clone(op, mapping);
    auto yield = cast<xfmr::YieldOp>(body.getTerminator());
    for (auto [result, yielded] : llvm::zip(region.getResults(), yield.getValues()))
      result.replaceAllUsesWith(mapping.lookupOrDefault(yielded));
    region.erase();
  }
}

namespace {

bool hasSingleUse(Value value) { return value.hasOneUse(); }

// Adds a reshape feeding `value` (and the split feeding it) to `ops` when
// they serve only this chain.
Operation* absorbReshape(Value value) {
  auto reshape = value.getDefiningOp<xfmr::ReshapeOp>();
  return reshape && hasSingleUse(reshape.getResult()) ? reshape.getOperation()
                                                      : nullptr;
}

void sortInBlockOrder(llvm::SmallVector<Operation*>& ops) {
  llvm::sort(ops, [](Operation* a, Operation* b) { return a->isBeforeInBlock(b); });
}

// A split whose every result is consumed by `ops` can move inside with them.
void absorbSplitOf(llvm::SmallVector<Operation*>& ops, Value someSplitResult) {
  auto split = someSplitResult.getDefiningOp<xfmr::SplitOp>();
  if (!split) return;
  llvm::SmallPtrSet<Operation*, 8> inside(ops.begin(), ops.end());
  for (Value result : split.getResults())
    for (Operation* user : result.getUsers())
      if (!inside.contains(user)) return;
  ops.push_back(split);
}

// add(x, r) feeding rms_norm  ->  residual_rms_norm(x, r, w)
int formResidualRmsNorm(func::FuncOp func) {
  llvm::SmallVector<std::pair<xfmr::AddOp, xfmr::RmsNormOp>> chains;
  func.walk([&](xfmr::RmsNormOp norm) {
    if (norm->getParentOfType<xfmr::FusionRegionOp>()) return;
    if (auto add = norm.getInput().getDefiningOp<xfmr::AddOp>())
      if (add->getBlock() == norm->getBlock()) chains.push_back({add, norm});
  });
  int formed = 0;
  for (auto [add, norm] : chains) {
    llvm::SmallVector<Operation*> ops = {add, norm};
    sortInBlockOrder(ops);
    formed += outlineFusionRegion("residual_rms_norm", ops) ? 1 : 0;
  }
  return formed;
}

// mul(silu(g), u) [with g, u split from one gate/up GEMM]  ->  silu_mul
// mul(gelu_tanh(g), u) [likewise]                             ->  gelu_tanh_mul
int formGatedActivation(func::FuncOp func) {
  llvm::SmallVector<std::pair<llvm::StringRef, llvm::SmallVector<Operation*>>> chains;
  func.walk([&](xfmr::MulOp mul) {
    if (mul->getParentOfType<xfmr::FusionRegionOp>()) return;
    Operation* activation = mul.getLhs().getDefiningOp();
    llvm::StringRef kind = isa_and_nonnull<xfmr::SiluOp>(activation)       ? "silu_mul"
                           : isa_and_nonnull<xfmr::GeluTanhOp>(activation) ? "gelu_tanh_mul"
                                                                           : "";
    if (kind.empty() || !hasSingleUse(activation->getResult(0))) return;
    llvm::SmallVector<Operation*> ops = {activation, mul};
    absorbSplitOf(ops, activation->getOperand(0));
    sortInBlockOrder(ops);
    chains.push_back({kind, ops});
  });
  int formed = 0;
  for (auto& [kind, ops] : chains) formed += outlineFusionRegion(kind, ops) ? 1 : 0;
  return formed;
}

// [rms_norm(q), rms_norm(k) per head,] rope(q), rope(k) and the KV write
// (kv_concat or paged_kv_append) of one attention  ->  rope_kv_write
int formRopeKvWrite(func::FuncOp func) {
  llvm::SmallVector<llvm::SmallVector<Operation*>> chains;
  auto collect = [&](Operation* attention, Value query, Operation* keyWrite,
                     Operation* valueWrite, Value newKey, Value newValue) {
    auto ropeQ = query.getDefiningOp<xfmr::RopeOp>();
    auto ropeK = newKey.getDefiningOp<xfmr::RopeOp>();
    if (!ropeQ || !ropeK || !hasSingleUse(ropeQ.getResult()) ||
        !hasSingleUse(ropeK.getResult()))
      return;
    llvm::SmallVector<Operation*> ops = {ropeQ, ropeK, keyWrite};
    if (valueWrite != keyWrite) ops.push_back(valueWrite);
    // qk_norm: a per-head rms_norm of q and of k feeding the ropes (both or neither).
    Value qIn = ropeQ.getInput(), kIn = ropeK.getInput();
    auto qNorm = qIn.getDefiningOp<xfmr::RmsNormOp>();
    auto kNorm = kIn.getDefiningOp<xfmr::RmsNormOp>();
    if (qNorm && kNorm && hasSingleUse(qNorm.getResult()) && hasSingleUse(kNorm.getResult())) {
      ops.append({qNorm, kNorm});
      qIn = qNorm.getInput();
      kIn = kNorm.getInput();
    } else if (qNorm || kNorm) {
      return;
    }
    for (Value in : {qIn, kIn, newValue})
      if (Operation* reshape = absorbReshape(in)) ops.push_back(reshape);
    if (auto reshape = qIn.getDefiningOp<xfmr::ReshapeOp>())
      absorbSplitOf(ops, reshape.getInput());
    sortInBlockOrder(ops);
    chains.push_back(ops);
  };
  func.walk([&](Operation* op) {
    if (op->getParentOfType<xfmr::FusionRegionOp>()) return;
    if (auto attention = dyn_cast<xfmr::AttentionOp>(op)) {
      auto keys = attention.getKey().getDefiningOp<xfmr::KvConcatOp>();
      auto values = attention.getValue().getDefiningOp<xfmr::KvConcatOp>();
      if (keys && values)
        collect(op, attention.getQuery(), keys, values, keys.getUpdate(),
                values.getUpdate());
    } else if (auto paged = dyn_cast<xfmr::PagedAttentionOp>(op)) {
      for (Operation* user : paged.getKeyPool().getUsers())
        if (auto append = dyn_cast<xfmr::PagedKvAppendOp>(user))
          if (append->getBlock() == op->getBlock() &&
              append->isBeforeInBlock(op))
            collect(op, paged.getQuery(), append, append, append.getKey(),
                    append.getValue());
    }
  });
  int formed = 0;
  for (auto& ops : chains)
    formed += outlineFusionRegion("rope_kv_write", ops) ? 1 : 0;
  return formed;
}

// moe_router(linear(h, Wrouter))  ->  moe_route: the router GEMM (E columns,
// a few per token) and the softmax/top-k run as one kernel reading h, so the
// [S, E] logits never make a round trip through memory.
int formMoeRoute(func::FuncOp func) {
  llvm::SmallVector<llvm::SmallVector<Operation*>> chains;
  func.walk([&](xfmr::MoeRouterOp router) {
    if (router->getParentOfType<xfmr::FusionRegionOp>()) return;
    auto linear = router.getRouterLogits().getDefiningOp<xfmr::LinearOp>();
    if (!linear || linear.getBias() || !hasSingleUse(linear.getResult()) ||
        linear->getBlock() != router->getBlock())
      return;
    chains.push_back({linear, router});
  });
  int formed = 0;
  for (auto& ops : chains) formed += outlineFusionRegion("moe_route", ops) ? 1 : 0;
  return formed;
}

}  // namespace

int formFusionRegions(func::FuncOp func) {
  return formRopeKvWrite(func) + formResidualRmsNorm(func) + formGatedActivation(func) +
         formMoeRoute(func);
}

}  // namespace kiln
