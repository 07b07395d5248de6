//===- SsmImporter.h - Mamba / Mamba-2 model -> xfmr IR --------*- C++ -*-===//
//
// Builds the unfused xfmr form of a state-space language model from its
// config and tensor table (no weight data is read).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "models/formats/ssm_source.h"
#include "models/importer/LlamaImporter.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

namespace kiln {

/// Imports `source` as a module holding one `@forward` function:
///   (tokens [S] i32, positions [S] i32,
///    past_conv_i [K-1, conv channels] (activation type), past_ssm_i (f32:
///    [I, N] mamba, [H, P, N] mamba2))
///     -> (logits [S, vocab], present_conv_i, present_ssm_i)
/// with the config attached as `xfmr.config` (architecture mamba | mamba2
/// and `layer_kinds`, every layer "mamba"). On failure, emits a diagnostic
/// naming the tensor and returns null.
mlir::OwningOpRef<mlir::ModuleOp> importSsmModel(mlir::MLIRContext& context, const formats::SsmSource& source,
                                                 const ImportOptions& options = {});

}  // namespace kiln
