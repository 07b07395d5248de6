//===- LowerToKernels.cpp - xfmr-lower-to-kernels --------------------------===//
//
// Every op that runs per batch becomes an xfmr.kernel (kind + compile-time
// params) or an xfmr.gemm. Three kinds of op stay as they are:
//   - xfmr.weight and ops computed from weights alone (concat of Q/K/V rows,
//     quantize, sparsify, slice): the artifact turns them into load-time weight preparation;
//   - xfmr.reshape: a view, no data moves;
//   - ops inside a fusion region are lowered with their region.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"
#include "runtime/artifact/plan_keys.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace kiln {
#define GEN_PASS_DEF_LOWERTOKERNELS
#include "compiler/Passes.h.inc"

namespace {

// True for values computed from weights alone (memoised per pass run).
class WeightOnlyAnalysis {
 public:
  bool isWeightOnly(Value value) {
    Operation* op = value.getDefiningOp();
    if (!op) return false;
    if (isa<xfmr::WeightOp>(op)) return true;
    if (auto it = cache_.find(op); it != cache_.end()) return it->second;
    bool weightOnly = op->getNumOperands() > 0 &&
                      isa<xfmr::ConcatOp, xfmr::StackOp, xfmr::QuantizeOp, xfmr::SparsifyOp,
                          xfmr::SliceOp, xfmr::ReshapeOp, xfmr::TransposeOp, xfmr::WeightOffsetOp>(op) &&
                      llvm::all_of(op->getOperands(),
                                   [&](Value v) { return isWeightOnly(v); });
    cache_[op] = weightOnly;
    return weightOnly;
  }

 private:
  llvm::DenseMap<Operation*, bool> cache_;
};

int64_t lastDim(Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  return type.getDimSize(type.getRank() - 1);
}

std::string elementOf(Value value) {
  return xfmr::elementTypeName(cast<RankedTensorType>(value.getType()).getElementType());
}

class Lowering {
 public:
  Lowering(MLIRContext* context, llvm::StringRef activationType)
      : builder_(context), activationType_(activationType) {}

  LogicalResult lower(func::FuncOp func);

 private:
  NamedAttribute param(llvm::StringRef name, int64_t value) {
    return builder_.getNamedAttr(name, builder_.getI64IntegerAttr(value));
  }
  NamedAttribute param(llvm::StringRef name, double value) {
    return builder_.getNamedAttr(name, builder_.getF64FloatAttr(value));
  }
  NamedAttribute param(llvm::StringRef name, llvm::StringRef value) {
    return builder_.getNamedAttr(name, builder_.getStringAttr(value));
  }
  NamedAttribute param(llvm::StringRef name, bool value) {
    return builder_.getNamedAttr(name, builder_.getBoolAttr(value));
  }
  // Replaces `op` by one kernel taking `args` and giving `op`'s results.
  void replaceWithKernel(Operation* op, llvm::StringRef kind, ValueRange args,
                         llvm::ArrayRef<NamedAttribute> params) {
    builder_.setInsertionPoint(op);
    auto kernel = builder_.create<xfmr::KernelOp>(
        op->getLoc(), op->getResultTypes(), builder_.getStringAttr(kind), args,
        builder_.getDictionaryAttr(params));
    op->replaceAllUsesWith(kernel.getResults());
    op->erase();
  }
  // Appends `name = "<type>"` when `value`'s element type is not the
  // activation type (mixed-precision kernels: f32 residual, bf16 branches).
  void appendType(llvm::SmallVector<NamedAttribute>& params, llvm::StringRef name,
                  Value value) {
    std::string type = elementOf(value);
    if (type != activationType_) params.push_back(param(name, llvm::StringRef(type)));
  }
  LogicalResult lowerRegion(xfmr::FusionRegionOp region);
  LogicalResult lowerRopeKvWrite(xfmr::FusionRegionOp region);
  void appendRopeParams(llvm::SmallVector<NamedAttribute>& params,
                        xfmr::RopeAttr rope);

  OpBuilder builder_;
  std::string activationType_;
  WeightOnlyAnalysis weights_;
};

void Lowering::appendRopeParams(llvm::SmallVector<NamedAttribute>& params,
                                xfmr::RopeAttr rope) {
  params.push_back(param(plan_key::kRopeTheta, rope.getTheta().convertToDouble()));
  params.push_back(param(plan_key::kRopeStyle, rope.getStyle()));
  params.push_back(param(plan_key::kRopeScaling, rope.getScaling()));
  params.push_back(param(plan_key::kRopeFactor, rope.getFactor().convertToDouble()));
  params.push_back(param(plan_key::kRopeLowFreqFactor,
                         rope.getLowFreqFactor().convertToDouble()));
  params.push_back(param(plan_key::kRopeHighFreqFactor,
                         rope.getHighFreqFactor().convertToDouble()));
  params.push_back(param(plan_key::kRopeOriginalMaxPosition,
                         rope.getOriginalMaxPosition()));
}

// rope_kv_write region -> rope_kv_append(qkv | q k v, positions, slots, k_pool, v_pool
//                                         [, q_norm, k_norm])
// The kernel takes its operands in this fixed order whatever the region's
// input order, so the CPU routine and the CUDA template have one signature.
LogicalResult Lowering::lowerRopeKvWrite(xfmr::FusionRegionOp region) {
  Block& body = region.getBody().front();
  xfmr::PagedKvAppendOp append;
  llvm::SmallVector<xfmr::RopeOp, 2> ropes;
  xfmr::SplitOp split;
  for (Operation& op : body) {
    if (auto a = dyn_cast<xfmr::PagedKvAppendOp>(op)) append = a;
    if (auto r = dyn_cast<xfmr::RopeOp>(op)) ropes.push_back(r);
    if (auto s = dyn_cast<xfmr::SplitOp>(op)) split = s;
  }
  if (!append || ropes.size() != 2)
    return region.emitError()
           << "cannot lower rope_kv_write region: expected two xfmr.rope and "
              "one xfmr.paged_kv_append inside (run xfmr-page-kv-cache first)";
  // The rope whose result is yielded is the query's.
  auto yield = cast<xfmr::YieldOp>(body.getTerminator());
  xfmr::RopeOp ropeQ = ropes[0], ropeK = ropes[1];
  if (!llvm::is_contained(yield.getValues(), ropeQ.getResult()))
    std::swap(ropeQ, ropeK);
  auto outside = [&](Value inner) -> Value {
    auto argument = dyn_cast<BlockArgument>(inner);
    return argument ? region.getInputs()[argument.getArgNumber()] : Value();
  };
  // qk_norm: the per-head norm between q's (k's) projection and its rope.
  auto normOf = [](xfmr::RopeOp rope) { return rope.getInput().getDefiningOp<xfmr::RmsNormOp>(); };
  xfmr::RmsNormOp normQ = normOf(ropeQ), normK = normOf(ropeK);
  if (bool(normQ) != bool(normK))
    return region.emitError() << "cannot lower rope_kv_write region: q and k "
                                 "must both have a per-head rms_norm or neither";
  if (normQ && normQ.getEpsilon() != normK.getEpsilon())
    return region.emitError() << "cannot lower rope_kv_write region: the q "
                                 "and k norms have different epsilons";
  auto beforeReshape = [](Value v) {
    if (auto norm = v.getDefiningOp<xfmr::RmsNormOp>()) v = norm.getInput();
    auto reshape = v.getDefiningOp<xfmr::ReshapeOp>();
    return reshape ? reshape.getInput() : v;
  };
  llvm::SmallVector<Value> args;
  if (split && outside(split.getInput())) {
    args.push_back(outside(split.getInput()));
  } else {
    for (Value v : {Value(beforeReshape(ropeQ.getInput())), Value(beforeReshape(ropeK.getInput())),
                    Value(beforeReshape(append.getValue()))}) {
      if (!outside(v))
        return region.emitError() << "cannot lower rope_kv_write region: its "
                                     "q/k/v do not come from region inputs";
      args.push_back(outside(v));
    }
  }
  for (Value v : {Value(ropeQ.getPositions()), Value(append.getSlotMapping()),
                  Value(append.getKeyPool()), Value(append.getValuePool())}) {
    if (!outside(v))
      return region.emitError() << "cannot lower rope_kv_write region: "
                                   "positions, slots and pools must be inputs";
    args.push_back(outside(v));
  }
  if (normQ) {
    for (Value w : {Value(normQ.getWeight()), Value(normK.getWeight())}) {
      if (!outside(w))
        return region.emitError() << "cannot lower rope_kv_write region: the "
                                     "q/k norm weights must be inputs";
      args.push_back(outside(w));
    }
  }
  auto q = cast<RankedTensorType>(ropeQ.getType());
  auto pool = cast<xfmr::KvPoolType>(append.getKeyPool().getType());
  llvm::SmallVector<NamedAttribute> params = {
      param(plan_key::kHeads, q.getDimSize(1)),
      param(plan_key::kKvHeads, static_cast<int64_t>(pool.getKvHeads())),
      param(plan_key::kHeadDim, static_cast<int64_t>(pool.getHeadDim())),
      param(plan_key::kPageSize, static_cast<int64_t>(pool.getPageSize())),
      param(plan_key::kMergedQkv, static_cast<bool>(split)),
      param(plan_key::kKvType, xfmr::kvPoolTypeName(pool)),
  };
  appendRopeParams(params, ropeQ.getRope());
  if (normQ) {
    params.push_back(param(plan_key::kQkNorm, true));
    params.push_back(param(plan_key::kQkNormEpsilon, normQ.getEpsilon().convertToDouble()));
  }
  replaceWithKernel(region, "rope_kv_append", args, params);
  return success();
}

LogicalResult Lowering::lowerRegion(xfmr::FusionRegionOp region) {
  llvm::StringRef kind = region.getKind();
  if (kind == "rope_kv_write") return lowerRopeKvWrite(region);
  Block& body = region.getBody().front();
  if (kind == "residual_rms_norm") {
    xfmr::RmsNormOp norm;
    xfmr::AddOp add;
    for (Operation& op : body) {
      if (auto n = dyn_cast<xfmr::RmsNormOp>(op)) norm = n;
      if (auto a = dyn_cast<xfmr::AddOp>(op)) add = a;
    }
    // results: (sum, normed) when the sum is used later, else (normed).
    llvm::SmallVector<NamedAttribute> params = {
        param(plan_key::kHidden, lastDim(norm.getInput())),
        param(plan_key::kEpsilon, norm.getEpsilon().convertToDouble()),
        param(plan_key::kWritesSum, region.getNumResults() == 2)};
    // x and residual are the kernel's args 0 and 1 (the add's operands, in
    // the region's input order); the sum is kept, and normed, in sum_type.
    appendType(params, plan_key::kXType, region.getInputs()[0]);
    appendType(params, plan_key::kResidualType, region.getInputs()[1]);
    appendType(params, plan_key::kSumType, add.getResult());
    appendType(params, plan_key::kOutType, norm.getResult());
    replaceWithKernel(region, "residual_rms_norm", region.getInputs(), params);
    return success();
  }
  if (kind == "moe_route") {
    // (h, Wrouter) -> (weights, experts): the router GEMM inside the kernel.
    xfmr::MoeRouterOp router;
    for (Operation& op : body)
      if (auto r = dyn_cast<xfmr::MoeRouterOp>(op)) router = r;
    auto weight = region.getInputs().size() == 2
                      ? dyn_cast<RankedTensorType>(region.getInputs()[1].getType())
                      : RankedTensorType();
    if (!router || !weight || weight.getRank() != 2)
      return region.emitError() << "cannot lower moe_route region: expected linear(h, Wrouter) "
                                   "feeding one xfmr.moe_router";
    llvm::SmallVector<NamedAttribute> params = {
        param(plan_key::kExperts, weight.getDimSize(0)),
        param(plan_key::kTopK, static_cast<int64_t>(router.getTopK())),
        param(plan_key::kNormalize, router.getNormalize()),
        param(plan_key::kHidden, weight.getDimSize(1)),
        param(plan_key::kWeightType, llvm::StringRef(elementOf(region.getInputs()[1])))};
    replaceWithKernel(region, "moe_router", region.getInputs(), params);
    return success();
  }
  if (kind == "silu_mul" || kind == "gelu_tanh_mul") {
    // One kernel kind for both gated activations; gelu_tanh says which (the
    // CUDA gemm epilogues that fold silu_mul take the SiLU form only).
    bool merged = llvm::any_of(body, [](Operation& op) { return isa<xfmr::SplitOp>(op); });
    llvm::SmallVector<NamedAttribute> params = {
        param(plan_key::kFfn, lastDim(region.getResult(0))),
        param(plan_key::kMergedGateUp, merged)};
    if (kind == "gelu_tanh_mul") params.push_back(param(plan_key::kActivation, llvm::StringRef("gelu_tanh")));
    replaceWithKernel(region, "silu_mul", region.getInputs(), params);
    return success();
  }
  return region.emitError() << "cannot lower fusion region '" << kind << "'";
}

LogicalResult Lowering::lower(func::FuncOp func) {
  llvm::SmallVector<Operation*> ops;
  for (Operation& op : func.getBody().front()) ops.push_back(&op);
  for (Operation* op : ops) {
    if (isa<func::ReturnOp, xfmr::WeightOp, xfmr::ReshapeOp, xfmr::KernelOp,
            xfmr::GemmOp>(op))
      continue;
    if (op->getNumResults() >= 1 && weights_.isWeightOnly(op->getResult(0)))
      continue;
    builder_.setInsertionPoint(op);
    LogicalResult result =
        llvm::TypeSwitch<Operation*, LogicalResult>(op)
            .Case([&](xfmr::FusionRegionOp region) { return lowerRegion(region); })
            .Case([&](xfmr::EmbedOp embed) {
              llvm::SmallVector<NamedAttribute> params = {
                  param(plan_key::kHidden, lastDim(embed.getResult())),
                  param(plan_key::kTableType, elementOf(embed.getTable()))};
              if (std::optional<llvm::APFloat> scale = embed.getScale())
                params.push_back(param(plan_key::kScale, scale->convertToDouble()));
              appendType(params, plan_key::kOutType, embed.getResult());
              replaceWithKernel(embed, "embedding", embed->getOperands(), params);
              return success();
            })
            .Case([&](xfmr::RmsNormOp norm) -> LogicalResult {
              // Rows of the kernel are the value's rows: a per-head norm
              // ([S, heads, D]) runs inside rope_kv_append only.
              if (cast<RankedTensorType>(norm.getInput().getType()).getRank() != 2)
                return norm.emitError()
                       << "cannot lower a per-head rms_norm outside a "
                          "rope_kv_write region (it runs inside rope_kv_append)";
              llvm::SmallVector<NamedAttribute> params = {
                  param(plan_key::kHidden, lastDim(norm.getInput())),
                  param(plan_key::kEpsilon, norm.getEpsilon().convertToDouble())};
              appendType(params, plan_key::kXType, norm.getInput());
              appendType(params, plan_key::kOutType, norm.getResult());
              replaceWithKernel(norm, "rms_norm", norm->getOperands(), params);
              return success();
            })
            .Case([&](xfmr::LinearOp linear) {
              linear.getResult().replaceAllUsesWith(
                  builder_.create<xfmr::GemmOp>(linear.getLoc(), linear.getType(),
                                                linear.getInput(), linear.getWeight(),
                                                /*scales=*/Value(), linear.getBias())
                      .getResult());
              linear.erase();
              return success();
            })
            .Case([&](xfmr::QuantizedLinearOp linear) {
              linear.getResult().replaceAllUsesWith(
                  builder_.create<xfmr::GemmOp>(linear.getLoc(), linear.getType(),
                                                linear.getInput(), linear.getWeight(),
                                                linear.getScales(), linear.getBias())
                      .getResult());
              linear.erase();
              return success();
            })
            .Case([&](xfmr::LogitsOp logits) {
              auto gemm = builder_.create<xfmr::GemmOp>(
                  logits.getLoc(), logits.getType(), logits.getHidden(),
                  logits.getWeight(), /*scales=*/Value(), /*bias=*/Value());
              gemm->setAttr(plan_key::kRole, builder_.getStringAttr("logits"));
              logits.getResult().replaceAllUsesWith(gemm.getResult());
              logits.erase();
              return success();
            })
            .Case([&](xfmr::PagedAttentionOp attention) {
              auto pool = cast<xfmr::KvPoolType>(attention.getKeyPool().getType());
              auto q = cast<RankedTensorType>(attention.getQuery().getType());
              llvm::SmallVector<NamedAttribute> params = {
                  param(plan_key::kHeads, q.getDimSize(1)),
                  param(plan_key::kKvHeads, static_cast<int64_t>(pool.getKvHeads())),
                  param(plan_key::kHeadDim, static_cast<int64_t>(pool.getHeadDim())),
                  param(plan_key::kPageSize, static_cast<int64_t>(pool.getPageSize())),
                  param(plan_key::kScale, attention.getScale().convertToDouble()),
                  param(plan_key::kKvType, xfmr::kvPoolTypeName(pool)),
                  param(plan_key::kTreeMask, static_cast<bool>(attention.getTreeMask()))};
              if (std::optional<uint64_t> window = attention.getSlidingWindow())
                params.push_back(param(plan_key::kSlidingWindow, static_cast<int64_t>(*window)));
              replaceWithKernel(attention, "paged_attention", attention->getOperands(), params);
              return success();
            })
            .Case([&](xfmr::PooledCausalConv1dOp conv) {
              auto weight = cast<RankedTensorType>(conv.getWeight().getType());
              llvm::SmallVector<NamedAttribute> params = {
                  param(plan_key::kChannels, weight.getDimSize(0)),
                  param(plan_key::kWidth, weight.getDimSize(2)),
                  param(plan_key::kSilu, conv.getActivation() == "silu"),
                  param(plan_key::kBias, static_cast<bool>(conv.getBias()))};
              replaceWithKernel(conv, "ssm_conv1d", conv->getOperands(), params);
              return success();
            })
            .Case([&](xfmr::PooledSelectiveScanOp scan) {
              auto aLog = cast<RankedTensorType>(scan.getALog().getType());
              llvm::SmallVector<NamedAttribute> params = {
                  param(plan_key::kChannels, aLog.getDimSize(0)),
                  param(plan_key::kState, aLog.getDimSize(1))};
              replaceWithKernel(scan, "selective_scan", scan->getOperands(), params);
              return success();
            })
            .Case([&](xfmr::PooledSsdScanOp scan) {
              auto x = cast<RankedTensorType>(scan.getX().getType());
              auto b = cast<RankedTensorType>(scan.getB().getType());
              llvm::SmallVector<NamedAttribute> params = {
                  param(plan_key::kHeads, x.getDimSize(1)),
                  param(plan_key::kHeadDim, x.getDimSize(2)),
                  param(plan_key::kGroups, b.getDimSize(1)),
                  param(plan_key::kState, b.getDimSize(2)),
                  param(plan_key::kChunkSize, static_cast<int64_t>(scan.getChunkSize())),
                  param(plan_key::kDtMin, scan.getDtMin().convertToDouble()),
                  param(plan_key::kDtMax, scan.getDtMax().convertToDouble())};
              replaceWithKernel(scan, "ssd_scan", scan->getOperands(), params);
              return success();
            })
            .Case([&](xfmr::PagedKvAppendOp append) -> LogicalResult {
              // Attention without positional encoding (Nemotron-H): no rope
              // region forms around the append, which runs alone.
              auto pool = cast<xfmr::KvPoolType>(append.getKeyPool().getType());
              if (xfmr::kvPoolTypeName(pool) == "int8" || xfmr::kvPoolTypeName(pool) == "fp8e4m3")
                return append.emitError() << "cannot lower a paged_kv_append outside a rope_kv_write region "
                                             "into a quantized pool";
              llvm::SmallVector<NamedAttribute> params = {
                  param(plan_key::kKvHeads, static_cast<int64_t>(pool.getKvHeads())),
                  param(plan_key::kHeadDim, static_cast<int64_t>(pool.getHeadDim())),
                  param(plan_key::kPageSize, static_cast<int64_t>(pool.getPageSize())),
                  param(plan_key::kKvType, xfmr::kvPoolTypeName(pool))};
              replaceWithKernel(append, "kv_append",
                                {append.getKey(), append.getValue(), append.getSlotMapping(),
                                 append.getKeyPool(), append.getValuePool()},
                                params);
              return success();
            })
            .Case([&](xfmr::ReluSquaredOp relu) {
              replaceWithKernel(relu, "relu_squared", relu->getOperands(),
                                {param(plan_key::kWidth, lastDim(relu.getResult()))});
              return success();
            })
            .Case([&](xfmr::GatedRmsNormOp norm) {
              llvm::SmallVector<NamedAttribute> params = {
                  param(plan_key::kFeatures, lastDim(norm.getResult())),
                  param(plan_key::kGroupSize, static_cast<int64_t>(norm.getGroupSize())),
                  param(plan_key::kEpsilon, norm.getEpsilon().convertToDouble())};
              replaceWithKernel(norm, "ssm_gated_norm", norm->getOperands(), params);
              return success();
            })
            .Case([&](xfmr::GatherLastTokensOp gather) {
              llvm::SmallVector<NamedAttribute> params = {
                  param(plan_key::kHidden, lastDim(gather.getHidden()))};
              appendType(params, plan_key::kType, gather.getResult());
              replaceWithKernel(gather, "gather_last_tokens", gather->getOperands(),
                                params);
              return success();
            })
            .Case([&](xfmr::AddOp add) {
              llvm::SmallVector<NamedAttribute> params = {
                  param(plan_key::kWidth, lastDim(add.getResult()))};
              appendType(params, plan_key::kAType, add.getLhs());
              appendType(params, plan_key::kBType, add.getRhs());
              appendType(params, plan_key::kOutType, add.getResult());
              replaceWithKernel(add, "add", add->getOperands(), params);
              return success();
            })
            .Case([&](xfmr::MulOp mul) {
              replaceWithKernel(mul, "mul", mul->getOperands(),
                                {param(plan_key::kWidth, lastDim(mul.getResult()))});
              return success();
            })
            .Case([&](xfmr::MoeRouterOp router) {
              // Router logits from elsewhere (a quantized router GEMM).
              llvm::SmallVector<NamedAttribute> params = {
                  param(plan_key::kExperts, lastDim(router.getRouterLogits())),
                  param(plan_key::kTopK, static_cast<int64_t>(router.getTopK())),
                  param(plan_key::kNormalize, router.getNormalize())};
              replaceWithKernel(router, "moe_router", router->getOperands(), params);
              return success();
            })
            .Case([&](xfmr::MoeFfnOp moe) {
              auto gate = cast<RankedTensorType>(moe.getGate().getType());
              llvm::SmallVector<NamedAttribute> params = {
                  param(plan_key::kHidden, gate.getDimSize(2)),
                  param(plan_key::kFfn, gate.getDimSize(1)),
                  param(plan_key::kExperts, gate.getDimSize(0)),
                  param(plan_key::kTopK, lastDim(moe.getExperts())),
                  param(plan_key::kWeightType, llvm::StringRef(elementOf(moe.getGate())))};
              replaceWithKernel(moe, "moe_ffn", moe->getOperands(), params);
              return success();
            })
            .Case([&](xfmr::GeluTanhOp gelu) -> LogicalResult {
              return gelu.emitError() << "cannot lower a gelu_tanh outside a "
                                         "gelu_tanh_mul region (the kernel is the gated form)";
            })
            .Case([&](xfmr::SiluOp silu) {
              replaceWithKernel(silu, "silu", silu->getOperands(),
                                {param(plan_key::kWidth, lastDim(silu.getResult()))});
              return success();
            })
            .Case([&](xfmr::SplitOp split) {
              llvm::SmallVector<NamedAttribute> params = {
                  param(plan_key::kAxis, static_cast<int64_t>(split.getAxis())),
                  builder_.getNamedAttr(plan_key::kSizes, split.getSizesAttr())};
              replaceWithKernel(split, "split", split->getOperands(), params);
              return success();
            })
            .Case([&](xfmr::AllReduceOp sum) {
              llvm::SmallVector<NamedAttribute> params = {
                  param(plan_key::kHidden, lastDim(sum.getResult())),
                  param(plan_key::kGroupSize, int64_t(sum.getGroupSize()))};
              appendType(params, plan_key::kType, sum.getResult());
              replaceWithKernel(sum, "all_reduce", sum->getOperands(), params);
              return success();
            })
            .Case<xfmr::SendOp, xfmr::RecvOp>([&](Operation* handover) {
              Value activation = isa<xfmr::SendOp>(handover) ? handover->getOperand(0) : handover->getResult(0);
              llvm::SmallVector<NamedAttribute> params = {
                  param(plan_key::kHidden, lastDim(activation)),
                  param(plan_key::kPeer, cast<IntegerAttr>(handover->getAttr("peer")).getInt())};
              appendType(params, plan_key::kType, activation);
              replaceWithKernel(handover, handover->getName().stripDialect(), handover->getOperands(), params);
              return success();
            })
            .Case<xfmr::TreePositionsOp, xfmr::TreeMaskOp, xfmr::AcceptOp,
                  xfmr::QuantizeOp, xfmr::DequantizeOp>([&](Operation* other) {
              std::string kind = other->getName().stripDialect().str();
              llvm::SmallVector<NamedAttribute> params(other->getAttrs());
              replaceWithKernel(other, kind, other->getOperands(), params);
              return success();
            })
            .Default([&](Operation* other) -> LogicalResult {
              return other->emitError()
                     << "cannot lower '" << other->getName()
                     << "' to a kernel: the kernel-level form needs fused, "
                        "paged attention (run xfmr-fuse-attention and "
                        "xfmr-page-kv-cache first)";
            });
    if (failed(result)) return failure();
  }
  return success();
}

struct LowerToKernelsPass : impl::LowerToKernelsBase<LowerToKernelsPass> {
  using Base::Base;

  void runOnOperation() override {
    Lowering lowering(&getContext(), activationType);
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (failed(lowering.lower(func))) return signalPassFailure();
  }
};

}  // namespace
}  // namespace kiln
