//===- FuseAttention.cpp - xfmr-fuse-attention -----------------------------===//
//
// Three rewrites, in this order:
//   1. the unfused attention chain -> one xfmr.attention;
//   2. linears sharing an input (Q/K/V, gate/up) -> one linear over the
//      row-concatenated weights, split again;
//   3. elementwise/reduction chains -> fusion regions (FusionRegions.cpp).
//
//===----------------------------------------------------------------------===//

#include "compiler/FusionRegions.h"
#include "compiler/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/MapVector.h"

using namespace mlir;

namespace kiln {
#define GEN_PASS_DEF_FUSEATTENTION
#include "compiler/Passes.h.inc"

namespace {

bool isHeadSwap(xfmr::TransposeOp transpose) {
  return transpose && transpose.getPermutation() == llvm::ArrayRef<int64_t>{1, 0, 2};
}

// [H, T, D] operand of a batch_matmul -> the token-major [T, Hkv, D] value it
// was made from by transpose (and repeat_kv for grouped-query attention).
Value tokenMajorKv(Value headsFirst) {
  if (auto repeat = headsFirst.getDefiningOp<xfmr::RepeatKvOp>())
    headsFirst = repeat.getInput();
  auto transpose = headsFirst.getDefiningOp<xfmr::TransposeOp>();
  return isHeadSwap(transpose) ? transpose.getInput() : Value();
}

// transpose(softmax(causal_mask(scale(qᵀ·kᵀ)), axis=2) · v)  ->  attention(q, k, v, scale, causal)
// (the mask's sliding window, if any, goes with it)
struct FuseAttentionChain : OpRewritePattern<xfmr::TransposeOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(xfmr::TransposeOp out,
                                PatternRewriter& rewriter) const override {
    if (!isHeadSwap(out)) return failure();
    auto pv = out.getInput().getDefiningOp<xfmr::BatchMatmulOp>();
    if (!pv || pv.getTransposeRhs()) return failure();
    auto softmax = pv.getLhs().getDefiningOp<xfmr::SoftmaxOp>();
    // Softmax over the key axis only; another axis is another computation.
    if (!softmax || softmax.getAxis() != 2) return failure();
    // Only the causal mask is fused; any other mask is left alone.
    auto mask = softmax.getInput().getDefiningOp<xfmr::CausalMaskOp>();
    if (!mask) return failure();
    // Without the scale this is not scaled dot-product attention.
    auto scale = mask.getInput().getDefiningOp<xfmr::ScaleOp>();
    if (!scale) return failure();
    auto qk = scale.getInput().getDefiningOp<xfmr::BatchMatmulOp>();
    if (!qk || !qk.getTransposeRhs()) return failure();
    auto queryTranspose = qk.getLhs().getDefiningOp<xfmr::TransposeOp>();
    if (!isHeadSwap(queryTranspose)) return failure();
    Value query = queryTranspose.getInput();
    Value key = tokenMajorKv(qk.getRhs());
    Value value = tokenMajorKv(pv.getRhs());
    if (!key || !value) return failure();
    for (Operation* intermediate : {qk.getOperation(), scale.getOperation(),
                                    mask.getOperation(), softmax.getOperation()})
      if (!intermediate->getResult(0).hasOneUse()) return failure();

    rewriter.replaceOpWithNewOp<xfmr::AttentionOp>(
        out, out.getType(), query, key, value, scale.getFactorAttr(),
        rewriter.getUnitAttr(), mask.getSlidingWindowAttr());
    return success();
  }
};

// Linears that share an input and whose weights are plain weight references
// of one element type:  linear(x, W1), linear(x, W2), ...
//   ->  split(linear(x, concat(W1, W2, ...)))
// The concat depends only on weights, so it runs once at load time.
int mergeProjections(func::FuncOp func) {
  llvm::MapVector<Value, llvm::SmallVector<xfmr::LinearOp>> byInput;
  func.walk([&](xfmr::LinearOp linear) {
    if (linear->getParentOfType<xfmr::FusionRegionOp>()) return;
    if (linear.getWeight().getDefiningOp<xfmr::WeightOp>())
      byInput[linear.getInput()].push_back(linear);
  });
  int merged = 0;
  for (auto& [input, group] : byInput) {
    if (group.size() < 2) continue;
    auto firstWeight = cast<RankedTensorType>(group.front().getWeight().getType());
    bool withBias = static_cast<bool>(group.front().getBias());
    bool compatible = llvm::all_of(group, [&](xfmr::LinearOp linear) {
      auto weight = cast<RankedTensorType>(linear.getWeight().getType());
      return weight.getElementType() == firstWeight.getElementType() &&
             weight.getDimSize(1) == firstWeight.getDimSize(1) &&
             static_cast<bool>(linear.getBias()) == withBias &&
             linear->getBlock() == group.front()->getBlock();
    });
    if (!compatible) continue;

    // Insert at the first of the group, so every user of any part comes
    // after the merged product. Weight references defined later are moved up
    // (they have no operands); a bias computed later keeps the group apart.
    xfmr::LinearOp first = group.front();
    for (xfmr::LinearOp linear : group)
      if (linear->isBeforeInBlock(first)) first = linear;
    auto definedAfterFirst = [&](Value v) {
      Operation* def = v.getDefiningOp();
      return def && def->getBlock() == first->getBlock() && first->isBeforeInBlock(def);
    };
    bool biasesReady = llvm::all_of(group, [&](xfmr::LinearOp linear) {
      return !withBias || !definedAfterFirst(linear.getBias()) ||
             linear.getBias().getDefiningOp<xfmr::WeightOp>();
    });
    if (!biasesReady) continue;
    for (xfmr::LinearOp linear : group)
      for (Value operand : {linear.getWeight(), linear.getBias()})
        if (operand && definedAfterFirst(operand)) operand.getDefiningOp()->moveBefore(first);
    OpBuilder builder(first);
    Location loc = builder.getFusedLoc(llvm::to_vector(llvm::map_range(
        group, [](xfmr::LinearOp l) { return l.getLoc(); })));
    llvm::SmallVector<Value> weights, biases;
    llvm::SmallVector<int64_t> sizes;
    int64_t rows = 0;
    for (xfmr::LinearOp linear : group) {
      weights.push_back(linear.getWeight());
      if (withBias) biases.push_back(linear.getBias());
      int64_t out = cast<RankedTensorType>(linear.getWeight().getType()).getDimSize(0);
      sizes.push_back(out);
      rows += out;
    }
    auto weightType = RankedTensorType::get({rows, firstWeight.getDimSize(1)},
                                            firstWeight.getElementType());
    Value weight = builder.create<xfmr::ConcatOp>(loc, weightType, weights,
                                                  builder.getI64IntegerAttr(0));
    Value bias;
    if (withBias) {
      auto biasElement = cast<RankedTensorType>(biases.front().getType()).getElementType();
      bias = builder.create<xfmr::ConcatOp>(
          loc, RankedTensorType::get({rows}, biasElement), biases,
          builder.getI64IntegerAttr(0));
    }
    auto inputType = cast<RankedTensorType>(input.getType());
    auto resultType = cast<RankedTensorType>(group.front().getType());
    llvm::SmallVector<int64_t> mergedShape(resultType.getShape());
    mergedShape.back() = rows;
    Value product = builder.create<xfmr::LinearOp>(
        loc, RankedTensorType::get(mergedShape, resultType.getElementType()),
        input, weight, bias);
    llvm::SmallVector<Type> partTypes;
    for (xfmr::LinearOp linear : group) partTypes.push_back(linear.getType());
    auto split = builder.create<xfmr::SplitOp>(
        loc, partTypes, product, builder.getI64IntegerAttr(inputType.getRank() - 1),
        builder.getDenseI64ArrayAttr(sizes));
    for (auto [linear, part] : llvm::zip(group, split.getResults())) {
      linear.getResult().replaceAllUsesWith(part);
      linear.erase();
    }
    ++merged;
  }
  return merged;
}

struct FuseAttentionPass : impl::FuseAttentionBase<FuseAttentionPass> {
  using Base::Base;

  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseAttentionChain>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      return signalPassFailure();
    getOperation().walk([&](func::FuncOp func) {
      if (mergeProjections) kiln::mergeProjections(func);
      if (formRegions) formFusionRegions(func);
    });
  }
};

}  // namespace
}  // namespace kiln
