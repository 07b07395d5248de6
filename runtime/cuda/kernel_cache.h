// The on-disk JIT cache of compiled kernel instances, and the parallel
// compile of a whole artifact's kernels at load time (never on the hot path).
//
// Key = hash(instance source, NVRTC options, arch, NVRTC version, the text of
// every kernel header in the include folders), so editing a template
// invalidates its instances. One file per instance, <dir>/<instance>-<key>.kjit:
// a cache entry (runtime/support/cache_entry.h) whose payload is the cubin,
// the compile log and the PTX. An entry that is truncated, corrupted, of
// another format version or another key is reported, deleted and compiled
// again; a folder that cannot be created or written is warned about once and
// the kernels stay in a process-wide memory cache instead.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "runtime/cuda/nvrtc_compiler.h"

namespace kiln::cuda {

struct KernelSource {
  std::string name;    // instance name (the extern "C" entry)
  std::string source;  // the .cu text
};

struct KernelCacheOptions {
  std::filesystem::path dir;  // defaultJitCacheDir() when empty
  CompileOptions compile;     // include_dirs default to defaultKernelIncludeDirs()
  int threads = 0;            // 0: hardware concurrency
  bool progress = true;       // progress bar on stderr
};

// $KILN_HOME/jit (KILN_HOME defaults to ~/.cache/kiln).
std::filesystem::path defaultJitCacheDir();

// 32 hex digits.
std::string kernelCacheKey(const KernelSource& kernel, const KernelCacheOptions& options,
                           const std::string& nvrtc_version);

struct CompileSummary {
  std::vector<CompiledKernel> kernels;  // in input order
  int compiled = 0;                     // fresh compiles
  int cached = 0;                       // cache hits
};

// Compiles (or loads from the cache) every kernel, in parallel. Failures are
// collected and returned together, each naming the instance with its log.
Result<CompileSummary> compileKernels(const std::vector<KernelSource>& kernels,
                                      KernelCacheOptions options);

}  // namespace kiln::cuda
