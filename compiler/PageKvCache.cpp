//===- PageKvCache.cpp - xfmr-page-kv-cache --------------------------------===//
//
// @forward(tokens, positions, past_k.0, past_v.0, ...) -> (logits, present...)
//   becomes
// @forward(tokens, positions, slot_mapping, block_tables, query_start,
//          kv_lens, k_pool.0, v_pool.0, ...) -> logits of each sequence's last token
//
// Per layer:  attention(q, kv_concat(past_k, k), kv_concat(past_v, v))
//   ->  paged_kv_append(k, v, k_pool, v_pool, slots);
//       paged_attention(q, k_pool, v_pool, tables, query_start, kv_lens)
// (a sliding window stays on the paged attention).
//
//===----------------------------------------------------------------------===//

#include "compiler/FusionRegions.h"
#include "compiler/Passes.h"
#include "compiler/RaggedBatch.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;

namespace kiln {
#define GEN_PASS_DEF_PAGEKVCACHE
#include "compiler/Passes.h.inc"

namespace {

constexpr int64_t kDynamic = ShapedType::kDynamic;

struct PageKvCachePass : impl::PageKvCacheBase<PageKvCachePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (Status valid = validatePageSize(pageSize, "page-size"); !valid.ok()) {
      module.emitError() << valid.error().message;
      return signalPassFailure();
    }
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward) {
      module.emitError() << "xfmr-page-kv-cache needs a @forward function, "
                            "found none";
      return signalPassFailure();
    }
    if (failed(page(forward))) signalPassFailure();
  }

  LogicalResult page(func::FuncOp forward);
};

LogicalResult PageKvCachePass::page(func::FuncOp forward) {
  // Already paged: nothing to do (the pass is idempotent).
  bool hasPaged = false;
  forward.walk([&](xfmr::PagedAttentionOp) { hasPaged = true; });
  if (hasPaged) return success();

  dissolveFusionRegions(forward);
  Block& entry = forward.getBody().front();
  MLIRContext* context = &getContext();
  OpBuilder builder(context);

  // Preconditions, diagnosed at the offending op.
  llvm::SmallVector<xfmr::AttentionOp> attentions;
  WalkResult walk = forward.walk([&](Operation* op) {
    if (isa<xfmr::SoftmaxOp>(op)) {
      op->emitError() << "xfmr-page-kv-cache needs fused attention, found an "
                         "unfused softmax (run xfmr-fuse-attention first)";
      return WalkResult::interrupt();
    }
    if (auto attention = dyn_cast<xfmr::AttentionOp>(op)) {
      auto keys = attention.getKey().getDefiningOp<xfmr::KvConcatOp>();
      auto values = attention.getValue().getDefiningOp<xfmr::KvConcatOp>();
      auto pastKey = keys ? dyn_cast<BlockArgument>(keys.getPast()) : nullptr;
      auto pastValue = values ? dyn_cast<BlockArgument>(values.getPast()) : nullptr;
      if (!pastKey || !pastValue || pastKey.getOwner() != &entry ||
          pastValue.getOwner() != &entry) {
        op->emitError() << "xfmr-page-kv-cache expects attention keys and "
                           "values from xfmr.kv_concat of a @forward argument "
                           "(the contiguous past KV)";
        return WalkResult::interrupt();
      }
      if (!attention.getCausal()) {
        op->emitError() << "xfmr-page-kv-cache supports causal attention "
                           "only, found a non-causal xfmr.attention";
        return WalkResult::interrupt();
      }
      attentions.push_back(attention);
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted()) return failure();
  // A state-space model without attention layers has nothing to page
  // (xfmr-pool-ssm-state makes its batch ragged).
  bool hasSsm = false;
  forward.walk([&](Operation* op) {
    if (isa<xfmr::CausalConv1dOp, xfmr::SelectiveScanOp, xfmr::SsdScanOp>(op)) hasSsm = true;
  });
  if (attentions.empty() && hasSsm) {
    formFusionRegions(forward);
    return success();
  }
  if (attentions.empty())
    return forward.emitError() << "xfmr-page-kv-cache found no xfmr.attention "
                                  "in @forward";

  // New ragged-batch arguments after tokens and positions.
  Type i32 = builder.getI32Type();
  auto vector = RankedTensorType::get({kDynamic}, i32);
  auto matrix = RankedTensorType::get({kDynamic, kDynamic}, i32);
  struct NewArg { const char* name; Type type; };
  const NewArg newArgs[] = {{"slot_mapping", vector}, {"block_tables", matrix},
                            {"query_start", vector}, {"kv_lens", vector}};
  Location loc = forward.getLoc();
  unsigned insertAt = 2;
  for (const NewArg& arg : newArgs) {
    forward.insertArgument(insertAt, arg.type,
                           builder.getDictionaryAttr(builder.getNamedAttr(
                               "xfmr.name", builder.getStringAttr(arg.name))),
                           loc);
    ++insertAt;
  }
  Value slots = entry.getArgument(2), tables = entry.getArgument(3);
  Value queryStart = entry.getArgument(4), kvLens = entry.getArgument(5);

  // Each past-KV argument becomes that layer's pool.
  llvm::SmallPtrSet<Operation*, 32> deadConcats;
  int layer = 0;
  for (xfmr::AttentionOp attention : attentions) {
    auto keys = attention.getKey().getDefiningOp<xfmr::KvConcatOp>();
    auto values = attention.getValue().getDefiningOp<xfmr::KvConcatOp>();
    auto keyType = cast<RankedTensorType>(keys.getUpdate().getType());
    auto poolType = xfmr::KvPoolType::get(
        context, pageSize, keyType.getDimSize(1), keyType.getDimSize(2),
        keyType.getElementType());
    for (auto [past, role] : {std::pair{keys.getPast(), "k_pool."},
                              std::pair{values.getPast(), "v_pool."}}) {
      auto argument = cast<BlockArgument>(past);
      argument.setType(poolType);
      forward.setArgAttr(argument.getArgNumber(), "xfmr.name",
                         builder.getStringAttr(role + std::to_string(layer)));
    }
    builder.setInsertionPoint(attention);
    builder.create<xfmr::PagedKvAppendOp>(
        keys.getLoc(), keys.getUpdate(), values.getUpdate(), keys.getPast(),
        values.getPast(), slots);
    Value output = builder.create<xfmr::PagedAttentionOp>(
        attention.getLoc(), attention.getType(), attention.getQuery(),
        keys.getPast(), values.getPast(), tables, queryStart, kvLens,
        /*tree_mask=*/Value(), attention.getScaleAttr(),
        attention.getSlidingWindowAttr());
    attention.getResult().replaceAllUsesWith(output);
    attention.erase();
    deadConcats.insert(keys);
    deadConcats.insert(values);
    ++layer;
  }

  // Only the last token of each sequence is sampled: gather those rows before
  // the final norm and return logits alone (the pools hold the KV state).
  if (failed(returnLastTokenLogits(forward, queryStart))) return failure();
  for (Operation* concat : deadConcats)
    if (concat->use_empty()) concat->erase();
  formFusionRegions(forward);
  return success();
}

}  // namespace
}  // namespace kiln
