//===- RaggedBatch.h - @forward over a ragged batch ------------*- C++ -*-===//
//
// What the passes that turn a one-sequence @forward into a ragged-batch
// entry share (xfmr-page-kv-cache for attention layers, xfmr-pool-ssm-state
// for state-space layers): named batch arguments, and sampling only each
// sequence's last token.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dialects/xfmr/IR/XfmrDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace kiln {

/// The argument of `func` named `name` (its `xfmr.name`), or null.
mlir::BlockArgument findNamedArgument(mlir::func::FuncOp func, llvm::StringRef name);

/// Inserts an argument of `type` named `name` at `index`.
mlir::BlockArgument insertNamedArgument(mlir::func::FuncOp func, unsigned index, llvm::StringRef name,
                                        mlir::Type type);

/// Gathers each sequence's last token (`query_start [B+1]`) before the final
/// norm and the LM head, and makes the logits @forward's only result (the
/// pools hold the carried state). Fails at the return when its first result
/// is not an `xfmr.logits`.
mlir::LogicalResult returnLastTokenLogits(mlir::func::FuncOp func, mlir::Value queryStart);

}  // namespace kiln
