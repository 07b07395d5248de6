//===- ArtifactWriter.h - lowered xfmr module -> manifest.json -*- C++ -*-===//
//
// Turns the kernel-level module (after xfmr-lower-to-kernels and
// xfmr-select-kernels) into the artifact's manifest: weight bindings with
// load-time preparation, the KV cache shape, the target, and per entry its
// inputs, arena plan (EntryLayout.h) and steps with their kernel variants.
// The format is docs/design/artifact.md.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/Pipelines.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

/// Identifies the model the artifact was compiled from, so the runtime can
/// refuse weights that changed since.
struct ModelIdentity {
  std::string path;          // absolute
  std::string format;        // gguf | safetensors
  uint64_t sizeBytes = 0;    // file size, or the sum over a checkpoint's files
  int64_t mtimeSeconds = 0;  // newest modification time
  /// Each file the weights come from (model.source_files).
  struct File {
    std::string name;  // relative to a checkpoint directory; a lone file's own name
    uint64_t sizeBytes = 0;
    int64_t mtimeSeconds = 0;
    std::string sampledHash;  // 16 hex digits
  };
  std::vector<File> files;
};

/// Builds the manifest; emits a diagnostic at the offending op and returns
/// nullopt if the module is not fully lowered or its kernel variants were
/// not chosen for `options.target`.
std::optional<llvm::json::Value>
buildManifest(mlir::ModuleOp module, const ModelIdentity& model,
              const CompileOptions& options, llvm::StringRef activationType);

}  // namespace kiln
