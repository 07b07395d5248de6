//===- FusionRegions.h - forming and dissolving fusion regions -*- C++ -*-===//
//
// Fusion regions group elementwise/reduction chains that become one kernel.
// xfmr-fuse-attention forms them; passes that rewrite the ops inside (paging)
// dissolve them first and form them again afterwards, so region formation is
// written once, here.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dialects/xfmr/IR/XfmrDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace kiln {

/// Moves `ops` (same block, in block order) into one `xfmr.fusion_region` of
/// `kind`, placed where the last of them was. Values from outside become
/// region inputs; results used outside become region results. Returns null
/// (and changes nothing) when an outside user of a result would precede the
/// region.
xfmr::FusionRegionOp outlineFusionRegion(llvm::StringRef kind,
                                         llvm::ArrayRef<mlir::Operation*> ops);

/// Replaces every fusion region in `func` by its body.
void dissolveFusionRegions(mlir::func::FuncOp func);

/// Forms residual_rms_norm, silu_mul, gelu_tanh_mul, rope_kv_write and moe_route regions in `func`
/// (for both the contiguous-KV and the paged form). Returns the number formed.
int formFusionRegions(mlir::func::FuncOp func);

}  // namespace kiln
