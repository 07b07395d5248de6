//===- LlamaImporter.h - Llama-family model -> xfmr IR ---------*- C++ -*-===//
//
// Builds the unfused xfmr form of a Llama / Mistral / Qwen2 / Qwen3 / Phi-3 / SmolLM model
// from its config and tensor table (no weight data is read).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "models/formats/model_source.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>

namespace kiln {

struct ImportOptions {
  /// Element type of activations and of the contiguous KV state ("f32" for
  /// the CPU reference, "bf16" for the GPU).
  std::string activationType = "f32";
  /// Element type of the residual stream: the embedding output and every
  /// residual sum (what the norms read); "" means the activation type. Norm
  /// outputs, GEMM outputs and the KV state stay in the activation type, so
  /// a bf16 model with an f32 residual adds bf16 branch outputs to f32 sums
  /// (xfmr.add promotes) instead of rounding the stream every layer.
  std::string residualType = "";
};

/// Imports `source` as a module holding one `@forward` function:
///   (tokens [S] i32, positions [S] i32, past_k_i/past_v_i [P, Hkv, D])
///     -> (logits [S, vocab], present_k_i/present_v_i [P+S, Hkv, D])
/// with the model config attached as the module attribute `xfmr.config`.
/// On failure, emits a diagnostic (naming the tensor or field) and returns
/// null.
mlir::OwningOpRef<mlir::ModuleOp>
importModel(mlir::MLIRContext& context, const formats::ModelSource& source,
            const ImportOptions& options = {});

}  // namespace kiln
