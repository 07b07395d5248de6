//===- LayerStack.h - finding a paged entry's decoder layers ---*- C++ -*-===//
//
// Passes that cut the layer stack (xfmr-expand-spec-draft,
// xfmr-split-pipeline-stages) find layer K of a paged entry by its KV write
// and the residual stream entering it by the norm that starts it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "mlir/IR/Block.h"

#include <map>

namespace kiln {

/// Each layer's top-level KV write in `body` (a paged_kv_append, or the
/// rope_kv_write region holding one), by the layer its pools belong to
/// (the entry's k_pool/v_pool arguments in order, two per layer).
std::map<int64_t, mlir::Operation*> kvWritesByLayer(mlir::Block& body);

/// The op that starts the layer whose KV write is `kvWrite`, walking back
/// from it: a residual_rms_norm region or a plain rms_norm; null if none.
mlir::Operation* layerInputNorm(mlir::Operation* kvWrite);

/// The residual stream that `norm` (from layerInputNorm) normalizes: the
/// region's sum, or the plain norm's input.
mlir::Value streamInto(mlir::Operation* norm);

}  // namespace kiln
