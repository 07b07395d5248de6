// dlopen with a readable failure: which library, every place tried, and why
// each failed. CUDA libraries are loaded this way so kiln binaries start on
// machines with no GPU, driver or toolkit.
#pragma once

#include <string>
#include <vector>

#include "runtime/support/error.h"

namespace kiln::cuda {

class DynamicLibrary {
 public:
  DynamicLibrary() = default;
  DynamicLibrary(DynamicLibrary&& other) noexcept;
  DynamicLibrary& operator=(DynamicLibrary&& other) noexcept;
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;
  ~DynamicLibrary();

  // Tries each candidate (a soname searched the usual way, or a path) in
  // order. `what` names the library in the error ("the CUDA driver (libcuda)").
  static Result<DynamicLibrary> open(const std::string& what, const std::vector<std::string>& candidates);

  void* symbol(const char* name) const;
  const std::string& path() const { return path_; }  // where it was actually loaded from

 private:
  void* handle_ = nullptr;
  std::string path_;
};

// Candidates for a CUDA toolkit library: the soname, then $CUDA_HOME/lib64,
// $CUDA_PATH/lib64, /usr/local/cuda/lib64 and /usr/local/cuda/lib.
std::vector<std::string> toolkitCandidates(const std::string& soname);

}  // namespace kiln::cuda
