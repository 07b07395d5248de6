//===- Pipelines.h - kiln's named pass pipelines ---------------*- C++ -*-===//
#pragma once

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Error.h"

#include <string>

namespace kiln {

/// Everything a user can choose when compiling a model. Defaults give the
/// plain paged pipeline with weights kept as stored.
struct CompileOptions {
  std::string quantWeights = "none";  // none | int8 | int4 | fp8
  unsigned quantGroupSize = 128;      // int4 only
  std::string quantKv = "none";       // none | bf16 | int8 | fp8
  unsigned pageSize = 16;
  std::string specTree = "none";      // none | chain:K | widths:W1,W2,...
  std::string specMode = "greedy";    // greedy | rejection
  /// The import's activation type: kernel params name the element type of
  /// every activation operand or result that differs from it.
  std::string activationType = "f32";
};

/// Checks option values; the message lists the accepted values.
llvm::Error validateCompileOptions(const CompileOptions& options);

/// canonicalize → fuse-attention → page-kv-cache → insert-quantization →
/// [expand-spec-verify] → lower-to-kernels → canonicalize/CSE.
void buildDefaultPipeline(mlir::OpPassManager& pm, const CompileOptions& options);

/// Registers `kiln-default-pipeline` for kiln-opt.
void registerPipelines();

}  // namespace kiln
