//===- ExpandSpecVerify.cpp - token-tree verify entry ----------------------===//
//
// Adds `@verify` beside the paged `@forward`: one target-model step over a
// ragged batch of draft token trees, one tree per sequence.
//
//   @verify(tokens [N], parents [N], base_positions [B], slot_mapping [N],
//           block_tables [B, max_blocks], query_start [B+1], kv_lens [B],
//           k_pool.0, v_pool.0, ..., [draft_probs [N, vocab]])
//       -> (logits [N, vocab], accepted [B, depth+1], count [B])
//
// Each tree's root is the sequence's last accepted token (parent −1), its
// other nodes the draft tokens. The body is @forward's with three changes:
//   positions     = xfmr.tree_positions(parents, base_positions, query_start)
//   attention     paged_attention(...) tree_mask xfmr.tree_mask(parents, query_start)
//   logits        for every node: gather_last_tokens(h) -> h
// and it ends in `xfmr.accept`. The KV of every node is appended to the
// slots the runtime gives in slot_mapping; after acceptance the runtime keeps
// the accepted path's slots (a prefix for chains, a copy for trees) and frees
// the rest.
//
// The tree shape is fixed at compile time (`tree=chain:K` or
// `widths:W1,W2,...`, children per node at each depth) and recorded on
// @verify as `xfmr.spec_tree = {widths, nodes, mode}` so the runtime builds
// trees of that shape and sizes the mask: chain:4 is widths 1,1,1,1 and
// 5 nodes with the root; widths:2,2,1 has 1 + 2 + 4 + 4 = 11 nodes.
//
//===----------------------------------------------------------------------===//

#include "compiler/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

namespace kiln {

#define GEN_PASS_DEF_EXPANDSPECVERIFY
#include "compiler/Passes.h.inc"

namespace {

using namespace mlir;

// Largest tree a verify step takes; the ancestor mask is [N, nodes] i8.
constexpr int64_t kMaxTreeNodes = 1024;

struct TreeShape {
  SmallVector<int64_t> widths;  // children per node at depth 1, 2, ...
  int64_t nodes = 0;            // root included
};

// Parses "chain:K" or "widths:W1,W2,..."; nullopt if malformed.
std::optional<TreeShape> parseTree(llvm::StringRef text) {
  TreeShape shape;
  if (text.consume_front("chain:")) {
    int64_t depth = 0;
    if (text.getAsInteger(10, depth) || depth < 1 || depth >= kMaxTreeNodes)
      return std::nullopt;
    shape.widths.assign(depth, 1);
  } else if (text.consume_front("widths:")) {
    SmallVector<llvm::StringRef> parts;
    text.split(parts, ',');
    for (llvm::StringRef part : parts) {
      int64_t width = 0;
      if (part.trim().getAsInteger(10, width) || width < 1 ||
          width >= kMaxTreeNodes)
        return std::nullopt;
      shape.widths.push_back(width);
    }
  } else {
    return std::nullopt;
  }
  int64_t level = 1;
  shape.nodes = 1;
  for (int64_t width : shape.widths) {
    level *= width;
    shape.nodes += level;
    if (shape.nodes > kMaxTreeNodes) return std::nullopt;
  }
  return shape;
}

// @forward's arguments, found by their xfmr.name.
struct PagedEntry {
  func::FuncOp func;
  BlockArgument tokens, positions, slotMapping, blockTables, queryStart, kvLens;
  SmallVector<BlockArgument> pools;  // k_pool.0, v_pool.0, k_pool.1, ...
};

std::optional<PagedEntry> findPagedEntry(func::FuncOp func) {
  if (func.isExternal() || func.getNumResults() != 1) return std::nullopt;
  PagedEntry entry;
  entry.func = func;
  for (BlockArgument argument : func.getArguments()) {
    auto name =
        func.getArgAttrOfType<StringAttr>(argument.getArgNumber(), "xfmr.name");
    if (!name) return std::nullopt;
    llvm::StringRef n = name.getValue();
    if (n == "tokens") entry.tokens = argument;
    else if (n == "positions") entry.positions = argument;
    else if (n == "slot_mapping") entry.slotMapping = argument;
    else if (n == "block_tables") entry.blockTables = argument;
    else if (n == "query_start") entry.queryStart = argument;
    else if (n == "kv_lens") entry.kvLens = argument;
    else if (isa<xfmr::KvPoolType>(argument.getType()))
      entry.pools.push_back(argument);
    else
      return std::nullopt;
  }
  if (!entry.tokens || !entry.positions || !entry.slotMapping ||
      !entry.blockTables || !entry.queryStart || !entry.kvLens ||
      entry.pools.empty())
    return std::nullopt;
  auto logits = dyn_cast<RankedTensorType>(func.getResultTypes()[0]);
  if (!logits || logits.getRank() != 2) return std::nullopt;
  bool paged = false;
  func.walk([&](xfmr::PagedAttentionOp) { paged = true; });
  if (!paged) return std::nullopt;
  return entry;
}

struct ExpandSpecVerifyPass
    : impl::ExpandSpecVerifyBase<ExpandSpecVerifyPass> {
  using Base::Base;

  void runOnOperation() override;

 private:
  LogicalResult buildVerify(const PagedEntry& entry, const TreeShape& shape);
};

void ExpandSpecVerifyPass::runOnOperation() {
  ModuleOp module = getOperation();
  std::optional<TreeShape> shape = parseTree(tree);
  if (!shape) {
    module->emitError() << "invalid value '" << tree
                        << "' for tree, expected chain:K (K >= 1, e.g. "
                           "chain:4) or widths:W1,W2,... (each >= 1, e.g. "
                           "widths:2,2,1), at most "
                        << kMaxTreeNodes << " nodes";
    return signalPassFailure();
  }
  if (!llvm::is_contained({"greedy", "rejection"}, mode)) {
    module->emitError() << "invalid value '" << mode
                        << "' for mode, expected one of: greedy, rejection";
    return signalPassFailure();
  }
  static constexpr llvm::StringLiteral kNeedsPaged =
      "xfmr-expand-spec-verify needs the paged @forward entry (run "
      "xfmr-page-kv-cache first)";
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  if (!forward) {
    module->emitError() << kNeedsPaged;
    return signalPassFailure();
  }
  std::optional<PagedEntry> entry = findPagedEntry(forward);
  if (!entry) {
    forward->emitError() << kNeedsPaged;
    return signalPassFailure();
  }
  if (auto existing = module.lookupSymbol("verify")) {
    existing->emitError() << "module already has a @verify symbol, expected "
                             "xfmr-expand-spec-verify to add it";
    return signalPassFailure();
  }
  if (failed(buildVerify(*entry, *shape))) return signalPassFailure();
}

LogicalResult ExpandSpecVerifyPass::buildVerify(const PagedEntry& entry,
                                                const TreeShape& shape) {
  func::FuncOp forward = entry.func;
  MLIRContext* context = forward.getContext();
  Location loc = forward.getLoc();
  bool rejection = mode == "rejection";
  auto i32Vector = RankedTensorType::get({ShapedType::kDynamic},
                                         IntegerType::get(context, 32));
  auto logitsType = cast<RankedTensorType>(forward.getResultTypes()[0]);
  int64_t depth = static_cast<int64_t>(shape.widths.size());

  // Signature: tokens, parents, base_positions, then @forward's metadata and
  // pools in their order, then draft_probs.
  SmallVector<Type> inputs;
  SmallVector<std::string> names;
  auto addInput = [&](Type type, llvm::StringRef name) {
    inputs.push_back(type);
    names.push_back(name.str());
  };
  addInput(entry.tokens.getType(), "tokens");
  addInput(i32Vector, "parents");
  addInput(i32Vector, "base_positions");
  addInput(entry.slotMapping.getType(), "slot_mapping");
  addInput(entry.blockTables.getType(), "block_tables");
  addInput(entry.queryStart.getType(), "query_start");
  addInput(entry.kvLens.getType(), "kv_lens");
  for (BlockArgument pool : entry.pools)
    addInput(pool.getType(),
             forward.getArgAttrOfType<StringAttr>(pool.getArgNumber(),
                                                  "xfmr.name")
                 .getValue());
  if (rejection) addInput(logitsType, "draft_probs");
  auto acceptedType = RankedTensorType::get(
      {ShapedType::kDynamic, depth + 1}, IntegerType::get(context, 32));
  SmallVector<Type> results = {logitsType, acceptedType, i32Vector};

  OpBuilder builder(context);
  builder.setInsertionPointAfter(forward);
  auto verify = builder.create<func::FuncOp>(
      loc, "verify", builder.getFunctionType(inputs, results));
  for (auto [i, name] : llvm::enumerate(names))
    verify.setArgAttr(i, "xfmr.name", builder.getStringAttr(name));
  // Keep the pools' other attributes (e.g. xfmr.kv_scales).
  for (auto [i, pool] : llvm::enumerate(entry.pools))
    if (DictionaryAttr attrs = forward.getArgAttrDict(pool.getArgNumber()))
      for (NamedAttribute attr : attrs)
        if (attr.getName() != "xfmr.name")
          verify.setArgAttr(7 + i, attr.getName(), attr.getValue());
  static constexpr llvm::StringLiteral kResultNames[] = {"logits", "accepted",
                                                         "accepted_count"};
  for (auto [i, name] : llvm::enumerate(kResultNames))
    verify.setResultAttr(i, "xfmr.name", builder.getStringAttr(name));
  verify->setAttr(
      "xfmr.spec_tree",
      builder.getDictionaryAttr(
          {builder.getNamedAttr("widths",
                                builder.getDenseI64ArrayAttr(shape.widths)),
           builder.getNamedAttr("nodes", builder.getI64IntegerAttr(shape.nodes)),
           builder.getNamedAttr("mode", builder.getStringAttr(mode))}));

  Block* body = verify.addEntryBlock();
  auto arg = [&](unsigned i) { return body->getArgument(i); };
  Value tokens = arg(0), parents = arg(1), base = arg(2), queryStart = arg(5);
  builder.setInsertionPointToStart(body);
  // positions = base + depth(node)
  Value positions = builder.create<xfmr::TreePositionsOp>(
      loc, entry.positions.getType(), parents, base, queryStart);
  // one [N, nodes] ancestor mask shared by every layer's attention
  Value mask = builder.create<xfmr::TreeMaskOp>(
      loc,
      RankedTensorType::get({ShapedType::kDynamic, shape.nodes},
                            IntegerType::get(context, 8)),
      parents, queryStart);

  IRMapping mapping;
  mapping.map(entry.tokens, tokens);
  mapping.map(entry.positions, positions);
  mapping.map(entry.slotMapping, arg(3));
  mapping.map(entry.blockTables, arg(4));
  mapping.map(entry.queryStart, queryStart);
  mapping.map(entry.kvLens, arg(6));
  for (auto [i, pool] : llvm::enumerate(entry.pools))
    mapping.map(pool, arg(7 + i));
  for (Operation& op : forward.getBody().front().without_terminator())
    builder.clone(op, mapping);
  auto forwardReturn =
      cast<func::ReturnOp>(forward.getBody().front().getTerminator());
  Value logits = mapping.lookupOrDefault(forwardReturn.getOperand(0));

  // paged_attention(q, ...)  ->  paged_attention(q, ...) tree_mask mask
  SmallVector<xfmr::PagedAttentionOp> attentions;
  verify.walk([&](xfmr::PagedAttentionOp op) { attentions.push_back(op); });
  for (xfmr::PagedAttentionOp attention : attentions) {
    if (attention->getParentOp() != verify)
      return attention.emitError()
             << "paged_attention inside " << attention->getParentOp()->getName()
             << " cannot take the tree mask, expected it in the entry body";
    if (attention.getTreeMask())
      return attention.emitError()
             << "paged_attention already has a tree_mask, expected the "
                "plain paged form";
    if (attention.getSlidingWindow())
      return attention.emitError()
             << "paged_attention has sliding_window "
             << *attention.getSlidingWindow()
             << ": speculative verify of sliding-window attention is not "
                "supported (compile with --spec-tree=none)";
    builder.setInsertionPoint(attention);
    auto masked = builder.create<xfmr::PagedAttentionOp>(
        attention.getLoc(), attention.getResult().getType(),
        attention.getQuery(), attention.getKeyPool(), attention.getValuePool(),
        attention.getBlockTables(), attention.getQueryStart(),
        attention.getKvLens(), mask, attention.getScaleAttr(),
        /*sliding_window=*/IntegerAttr());
    for (NamedAttribute attr : attention->getDiscardableAttrs())
      masked->setAttr(attr.getName(), attr.getValue());
    attention.getResult().replaceAllUsesWith(masked.getResult());
    attention.erase();
  }

  // gather_last_tokens(h, qstart)  ->  h   (logits for every node)
  SmallVector<xfmr::GatherLastTokensOp> gathers;
  verify.walk([&](xfmr::GatherLastTokensOp op) { gathers.push_back(op); });
  for (xfmr::GatherLastTokensOp gather : gathers) {
    if (gather.getHidden().getType() != gather.getResult().getType())
      return gather.emitError()
             << "gather_last_tokens from " << gather.getHidden().getType()
             << " to " << gather.getResult().getType()
             << " cannot be dropped, expected equal types";
    gather.getResult().replaceAllUsesWith(gather.getHidden());
    gather.erase();
  }

  Value draftProbs = rejection ? arg(inputs.size() - 1) : Value();
  builder.setInsertionPointToEnd(body);
  auto accept = builder.create<xfmr::AcceptOp>(
      loc, acceptedType, i32Vector, logits, tokens, parents, queryStart,
      draftProbs, builder.getStringAttr(mode));
  builder.create<func::ReturnOp>(
      forwardReturn.getLoc(),
      ValueRange{logits, accept.getAccepted(), accept.getCount()});
  return success();
}

}  // namespace
}  // namespace kiln
