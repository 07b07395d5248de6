//===- ShardTensorParallel.cpp - xfmr-shard-tensor-parallel ----------------===//
//
// One tensor-parallel rank's share of every attention layer and MLP
// (Megatron-LM's split, docs/design/parallelism.md). With N ranks, rank R:
//
//   q/k/v, gate/up  (column-parallel): rows of heads [R·H/N, (R+1)·H/N),
//                    KV heads [R·Hkv/N, ...), features [R·F/N, ...)
//   o, down         (row-parallel): the matching input columns, then
//                    xfmr.all_reduce of the partial sums
//
// The linears are found by their place in the graph, not by weight names:
// a column-parallel attention linear is one the attention's q, k or v
// reaches walking back; the output projection is the first linear after
// the attention; a down projection is a linear whose input reaches back to
// linears only (the gate/up), never to the residual stream or an argument.
// The values between a column-parallel linear and its row-parallel partner
// ([N, heads·D], [N, heads, D], [N, F], the past KV) keep their rank and
// lose N-fold in dimension 1; split sizes shrink with them. Weights are
// sliced by xfmr.slice (load-time preparation, no compile-time copy); a
// merged projection slices each part (each concat input, or each span the
// split after it reads) so that the rank's q, k and v stay together.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace kiln {

#define GEN_PASS_DEF_SHARDTENSORPARALLEL
#include "compiler/Passes.h.inc"

namespace {

using namespace mlir;

// A fusion region's block argument stands for the region's operand.
Value throughRegionArguments(Value value) {
  while (auto argument = dyn_cast<BlockArgument>(value)) {
    auto region = dyn_cast_or_null<xfmr::FusionRegionOp>(argument.getOwner()->getParentOp());
    if (!region) break;
    value = region.getInputs()[argument.getArgNumber()];
  }
  return value;
}

// What a value is computed from, walking back and stopping at linears.
struct Cone {
  llvm::SetVector<Operation*> linears;
  llvm::SetVector<Value> pastKv;  // entry arguments appended to by kv_concat
  bool reachesArguments = false;  // the residual stream, positions, tokens
};

Cone coneOf(ValueRange roots) {
  Cone cone;
  SmallVector<Value> work(roots.begin(), roots.end());
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value value = throughRegionArguments(work.pop_back_val());
    if (!seen.insert(value).second) continue;
    if (isa<BlockArgument>(value)) {
      cone.reachesArguments = true;
      continue;
    }
    Operation* def = value.getDefiningOp();
    if (isa<xfmr::LinearOp>(def)) {
      cone.linears.insert(def);
      continue;
    }
    if (auto region = dyn_cast<xfmr::FusionRegionOp>(def)) {
      Operation* yield = region.getBody().front().getTerminator();
      work.push_back(yield->getOperand(cast<OpResult>(value).getResultNumber()));
      continue;
    }
    if (auto concat = dyn_cast<xfmr::KvConcatOp>(def))
      cone.pastKv.insert(throughRegionArguments(concat.getPast()));
    for (Value operand : def->getOperands()) work.push_back(operand);
  }
  return cone;
}

// The sizes of the split that cuts a merged projection's output apart,
// directly or inside the fusion region it enters; empty if none does.
SmallVector<int64_t> splitSizesAfter(Value result) {
  for (OpOperand& use : result.getUses()) {
    Value seen = result;
    if (auto region = dyn_cast<xfmr::FusionRegionOp>(use.getOwner()))
      seen = region.getBody().front().getArgument(use.getOperandNumber());
    for (Operation* user : seen.getUsers())
      if (auto split = dyn_cast<xfmr::SplitOp>(user))
        return SmallVector<int64_t>(split.getSizes());
  }
  return {};
}

struct ShardTensorParallelPass : impl::ShardTensorParallelBase<ShardTensorParallelPass> {
  using Base::Base;
  void runOnOperation() override;

 private:
  LogicalResult checkModelDivides(ModuleOp module);
  FailureOr<Value> rowShare(OpBuilder& builder, Value weight, ArrayRef<int64_t> splitSizes, Operation* where);
  Value slice(OpBuilder& builder, Value input, int64_t axis, int64_t offset, int64_t size);
  void shardValue(Value value);
  LogicalResult propagate(const llvm::SmallPtrSetImpl<Operation*>& rowParallel);

  llvm::DenseSet<Value> sharded_;
  SmallVector<Value> work_;
  llvm::SmallPtrSet<Operation*, 32> retyped_;
};

LogicalResult ShardTensorParallelPass::checkModelDivides(ModuleOp module) {
  auto config = module->getAttrOfType<DictionaryAttr>("xfmr.config");
  if (!config) return success();
  auto number = [&](StringRef key) -> int64_t {
    auto value = config.getAs<IntegerAttr>(key);
    return value ? value.getInt() : 0;
  };
  const int64_t heads = number("num_heads"), kvHeads = number("num_kv_heads"),
                features = number("intermediate_size");
  for (int64_t count : {heads, kvHeads, features})
    if (count > 0 && count % size != 0)
      return module->emitError() << "invalid value " << int64_t(size)
                                 << " for the tensor-parallel size: it must divide the model's attention heads ("
                                 << heads << "), KV heads (" << kvHeads << ") and MLP intermediate size ("
                                 << features << ")";
  return success();
}

Value ShardTensorParallelPass::slice(OpBuilder& builder, Value input, int64_t axis, int64_t offset, int64_t size) {
  auto type = cast<RankedTensorType>(input.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[axis] = size;
  return builder.create<xfmr::SliceOp>(input.getLoc(), RankedTensorType::get(shape, type.getElementType()), input,
                                       builder.getI64IntegerAttr(axis), builder.getI64IntegerAttr(offset),
                                       builder.getI64IntegerAttr(size));
}

// The rank's rows of a column-parallel weight or bias: of each part (a
// concat's input, or a span the split after the linear reads), the rank's
// 1/N of its rows.
FailureOr<Value> ShardTensorParallelPass::rowShare(OpBuilder& builder, Value weight, ArrayRef<int64_t> splitSizes,
                                                   Operation* where) {
  struct Part {
    Value source;
    int64_t offset, rows;
  };
  SmallVector<Part> parts;
  auto concat = weight.getDefiningOp<xfmr::ConcatOp>();
  if (concat && concat.getAxis() == 0) {
    for (Value input : concat.getInputs())
      parts.push_back({input, 0, cast<RankedTensorType>(input.getType()).getDimSize(0)});
  } else if (splitSizes.size() > 1) {
    int64_t at = 0;
    for (int64_t rows : splitSizes) {
      parts.push_back({weight, at, rows});
      at += rows;
    }
  } else {
    parts.push_back({weight, 0, cast<RankedTensorType>(weight.getType()).getDimSize(0)});
  }
  SmallVector<Value> slices;
  for (const Part& part : parts) {
    if (part.rows % size != 0)
      return where->emitError() << "tensor-parallel size " << int64_t(size) << " does not divide a part of "
                                << part.rows << " rows of this linear's weight";
    const int64_t share = part.rows / size;
    slices.push_back(slice(builder, part.source, 0, part.offset + rank * share, share));
  }
  if (slices.size() == 1) return slices.front();
  int64_t rows = 0;
  for (Value s : slices) rows += cast<RankedTensorType>(s.getType()).getDimSize(0);
  auto type = cast<RankedTensorType>(weight.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[0] = rows;
  return builder
      .create<xfmr::ConcatOp>(weight.getLoc(), RankedTensorType::get(shape, type.getElementType()), slices,
                              builder.getI64IntegerAttr(0))
      .getResult();
}

// [N, X] -> [N, X/size], [N, heads, D] -> [N, heads/size, D].
void ShardTensorParallelPass::shardValue(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  if (!type || type.getRank() < 2 || !sharded_.insert(value).second) return;
  SmallVector<int64_t> shape(type.getShape());
  shape[1] /= size;
  value.setType(RankedTensorType::get(shape, type.getElementType()));
  work_.push_back(value);
}

LogicalResult ShardTensorParallelPass::propagate(const llvm::SmallPtrSetImpl<Operation*>& rowParallel) {
  while (!work_.empty()) {
    Value value = work_.pop_back_val();
    for (OpOperand& use : value.getUses()) {
      Operation* user = use.getOwner();
      if (isa<xfmr::LinearOp>(user)) {
        if (!rowParallel.contains(user) || use.getOperandNumber() != 0)
          return user->emitError() << "a tensor-parallel shard reaches this linear, expected only the "
                                      "attention output and MLP down projections to read one";
        continue;
      }
      if (auto region = dyn_cast<xfmr::FusionRegionOp>(user)) {
        shardValue(region.getBody().front().getArgument(use.getOperandNumber()));
        continue;
      }
      if (isa<xfmr::YieldOp>(user)) {
        shardValue(user->getParentOp()->getResult(use.getOperandNumber()));
        continue;
      }
      if (isa<func::ReturnOp>(user) || !retyped_.insert(user).second) continue;
      if (auto split = dyn_cast<xfmr::SplitOp>(user)) {
        if (split.getAxis() != 1)
          return split.emitError() << "a tensor-parallel shard is split along axis " << split.getAxis()
                                   << ", expected axis 1 (the heads or features the ranks divide)";
        SmallVector<int64_t> sizes(split.getSizes());
        for (int64_t& s : sizes) s /= size;
        split.setSizes(sizes);
      }
      for (Value result : user->getResults()) shardValue(result);
    }
  }
  return success();
}

void ShardTensorParallelPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (size < 1 || rank >= size) {
    module->emitError() << "invalid rank " << int64_t(rank) << " for tensor-parallel size " << int64_t(size)
                        << ", expected a size of at least 1 and a rank below it";
    return signalPassFailure();
  }
  if (size == 1) return;
  if (failed(checkModelDivides(module))) return signalPassFailure();

  llvm::SmallPtrSet<Operation*, 32> columnParallel, rowParallel;
  llvm::SetVector<Value> pastKv;
  WalkResult found = module.walk([&](xfmr::AttentionOp attention) {
    auto query = cast<RankedTensorType>(attention.getQuery().getType());
    auto key = cast<RankedTensorType>(attention.getKey().getType());
    if (query.getDimSize(1) % size != 0 || key.getDimSize(1) % size != 0) {
      attention.emitError() << "tensor-parallel size " << int64_t(size) << " does not divide this attention's "
                            << query.getDimSize(1) << " query heads and " << key.getDimSize(1) << " KV heads";
      return WalkResult::interrupt();
    }
    Cone cone = coneOf(attention->getOperands());
    if (cone.linears.empty()) {
      attention.emitError() << "no q/k/v projection found before this attention";
      return WalkResult::interrupt();
    }
    for (Operation* linear : cone.linears) columnParallel.insert(linear);
    pastKv.insert(cone.pastKv.begin(), cone.pastKv.end());
    // The output projection: the first linear after the attention.
    Value value = attention.getResult();
    while (value.hasOneUse() && !isa<xfmr::LinearOp>(*value.getUsers().begin()) &&
           value.getUsers().begin()->getNumResults() == 1)
      value = value.getUsers().begin()->getResult(0);
    auto output = value.hasOneUse() ? dyn_cast<xfmr::LinearOp>(*value.getUsers().begin()) : nullptr;
    if (!output || output.getInput() != value) {
      attention.emitError() << "no output projection found after this attention, expected a linear reading "
                               "its (reshaped) result";
      return WalkResult::interrupt();
    }
    rowParallel.insert(output);
    return WalkResult::advance();
  });
  if (found.wasInterrupted()) return signalPassFailure();
  // The MLPs: a down projection's input comes from linears alone.
  module.walk([&](xfmr::LinearOp linear) {
    if (columnParallel.contains(linear) || rowParallel.contains(linear)) return;
    Cone cone = coneOf(linear.getInput());
    if (cone.reachesArguments || cone.linears.empty() ||
        llvm::any_of(cone.linears,
                     [&](Operation* up) { return columnParallel.contains(up) || rowParallel.contains(up); }))
      return;
    rowParallel.insert(linear);
    for (Operation* up : cone.linears) columnParallel.insert(up);
  });

  OpBuilder builder(&getContext());
  for (Operation* op : columnParallel) {
    auto linear = cast<xfmr::LinearOp>(op);
    builder.setInsertionPoint(linear);
    SmallVector<int64_t> sizes = splitSizesAfter(linear.getResult());
    FailureOr<Value> weight = rowShare(builder, linear.getWeight(), sizes, linear);
    if (failed(weight)) return signalPassFailure();
    linear.getWeightMutable().assign(*weight);
    if (Value bias = linear.getBias()) {
      FailureOr<Value> share = rowShare(builder, bias, sizes, linear);
      if (failed(share)) return signalPassFailure();
      linear.getBiasMutable().assign(*share);
    }
    shardValue(linear.getResult());
  }
  for (Value past : pastKv) shardValue(past);
  for (Operation* op : rowParallel) {
    auto linear = cast<xfmr::LinearOp>(op);
    builder.setInsertionPoint(linear);
    auto weight = cast<RankedTensorType>(linear.getWeight().getType());
    const int64_t share = weight.getDimSize(1) / size;
    linear.getWeightMutable().assign(slice(builder, linear.getWeight(), 1, rank * share, share));
    // The partial sums add up over the group; the bias must be added once.
    if (linear.getBias() && rank != 0) linear.getBiasMutable().clear();
    builder.setInsertionPointAfter(linear);
    auto sum = builder.create<xfmr::AllReduceOp>(linear.getLoc(), linear.getType(), linear.getResult(),
                                                 builder.getI64IntegerAttr(size));
    linear.getResult().replaceAllUsesExcept(sum.getResult(), sum);
  }
  if (failed(propagate(rowParallel))) return signalPassFailure();

  // The entries take the rank's past KV and return what their bodies do.
  module.walk([&](func::FuncOp func) {
    if (func.isExternal()) return;
    Block& body = func.getBody().front();
    func.setType(FunctionType::get(&getContext(), body.getArgumentTypes(),
                                   body.getTerminator()->getOperandTypes()));
  });
  // The whole weights the slices replaced (a concat first, then its inputs).
  for (bool erased = true; erased;) {
    SmallVector<Operation*> dead;
    module.walk([&](Operation* op) {
      if (isa<xfmr::WeightOp, xfmr::ConcatOp>(op) && op->use_empty()) dead.push_back(op);
    });
    for (Operation* op : dead) op->erase();
    erased = !dead.empty();
  }
}

}  // namespace
}  // namespace kiln
