// NVRTC, loaded with dlopen from one X-macro table, and the compile of one
// kernel instance to PTX and CUBIN with ptxas' resource report.
#pragma once

#include <nvrtc.h>

#include <string>
#include <vector>

#include "runtime/cuda/dynamic_library.h"

namespace kiln::cuda {

#define KILN_NVRTC_FUNCTIONS(X) \
  X(nvrtcVersion)               \
  X(nvrtcGetErrorString)        \
  X(nvrtcCreateProgram)         \
  X(nvrtcDestroyProgram)        \
  X(nvrtcCompileProgram)        \
  X(nvrtcGetPTXSize)            \
  X(nvrtcGetPTX)                \
  X(nvrtcGetCUBINSize)          \
  X(nvrtcGetCUBIN)              \
  X(nvrtcGetProgramLogSize)     \
  X(nvrtcGetProgramLog)

struct Nvrtc {
#define KILN_DECLARE(name) decltype(&::name) name = nullptr;
  KILN_NVRTC_FUNCTIONS(KILN_DECLARE)
#undef KILN_DECLARE
  DynamicLibrary library;
  DynamicLibrary builtins;  // libnvrtc-builtins, preloaded from libnvrtc's folder
  int major = 0, minor = 0;
  std::string versionText() const;
};

// Loads libnvrtc.so.13 (then older sonames) once per process.
Result<const Nvrtc*> loadNvrtc();

// ptxas' report for one entry (from `--ptxas-options=-v`).
struct ResourceUsage {
  bool found = false;
  int registers = 0;
  int shared_bytes = 0;     // static shared memory
  int stack_bytes = 0;      // stack frame
  int spill_stores = 0;     // bytes
  int spill_loads = 0;      // bytes
  int constant_bytes = 0;   // cmem[0]
  int barriers = 0;
};

// Parses ptxas -v lines for `entry` ("Function properties for <entry>",
// "Used N registers, used B barriers, S bytes smem, C bytes cmem[0]").
ResourceUsage parseResourceUsage(const std::string& log, const std::string& entry);

struct CompileOptions {
  std::string arch = "sm_90";            // --gpu-architecture
  std::vector<std::string> include_dirs; // codegen/kernels and the toolkit's include/
  bool cubin = true;                     // a CUBIN for arch (sm_XX), with ptxas' report
  bool ptx = false;                      // PTX for the virtual arch (compute_XX): a second compile
  std::vector<std::string> extra;        // more NVRTC options
};

// The option list NVRTC receives (also part of the JIT cache key).
std::vector<std::string> nvrtcOptions(const CompileOptions& options, bool for_cubin);

struct CompiledKernel {
  std::string name;
  std::string ptx;    // empty unless options.ptx
  std::string cubin;  // empty unless options.cubin
  std::string log;    // NVRTC + ptxas output
  ResourceUsage resources;
};

// Compiles one instance source. A failure names the instance and carries the
// compiler log.
Result<CompiledKernel> compileKernel(const std::string& name, const std::string& source,
                                     const CompileOptions& options);

// Include directories for kernels: the kernel templates (kernelTemplatesDir():
// $KILN_KERNELS_DIR, else share/kiln/kernels beside the executable), plus the
// toolkit include/ folder when it exists (CUB/libcu++ headers; NVRTC has its
// own cuda_bf16.h).
std::vector<std::string> defaultKernelIncludeDirs();

}  // namespace kiln::cuda
