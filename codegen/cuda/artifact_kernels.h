// The artifact's kernels/ folder: one readable .cu per kernel instance of its
// manifest. Kept apart from instance_source.h (no JSON types) so that
// kiln-compile, built without exceptions, can call it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "runtime/support/error.h"

namespace kiln::cuda_codegen {

struct WrittenSources {
  std::vector<std::string> written;      // instance names whose file changed
  std::vector<std::string> unchanged;    // already up to date (not rewritten)
  std::vector<std::string> unsupported;  // "instance (kind): reason" for variants with no CUDA kernel yet
};

// Writes DIR/kernels/<instance>.cu for every distinct kernel instance among
// the steps' variants (those the CUDA backend may compile; none for a
// target cpu plan) of every entry of DIR/manifest.json, rewriting a file
// only when its content changed.
Result<WrittenSources> writeInstanceSources(const std::filesystem::path& artifact_dir);

}  // namespace kiln::cuda_codegen
