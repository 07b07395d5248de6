// The CUDA driver API, loaded with dlopen from one X-macro table so binaries
// start on machines without a driver. Only the table below is callable; add a
// row to use another entry point.
#pragma once

#include <cuda.h>

#include <string>

#include "runtime/cuda/dynamic_library.h"

namespace kiln::cuda {

// X(name): the exported symbol name (versioned `_v2` names where cuda.h maps
// the plain name to one).
#define KILN_CUDA_DRIVER_FUNCTIONS(X) \
  X(cuInit)                           \
  X(cuDriverGetVersion)               \
  X(cuGetErrorName)                   \
  X(cuGetErrorString)                 \
  X(cuDeviceGetCount)                 \
  X(cuDeviceGet)                      \
  X(cuDeviceGetName)                  \
  X(cuDeviceGetAttribute)             \
  X(cuDevicePrimaryCtxRetain)         \
  X(cuDevicePrimaryCtxRelease_v2)     \
  X(cuCtxSetCurrent)                  \
  X(cuCtxSynchronize)                 \
  X(cuMemAlloc_v2)                    \
  X(cuMemFree_v2)                     \
  X(cuMemcpyHtoD_v2)                  \
  X(cuMemcpyDtoH_v2)                  \
  X(cuMemsetD8_v2)                    \
  X(cuModuleLoadData)                 \
  X(cuModuleUnload)                   \
  X(cuModuleGetFunction)              \
  X(cuFuncGetAttribute)               \
  X(cuFuncSetAttribute)               \
  X(cuLaunchKernel)                   \
  X(cuEventCreate)                    \
  X(cuEventDestroy_v2)                \
  X(cuEventRecord)                    \
  X(cuEventSynchronize)               \
  X(cuEventElapsedTime_v2)

struct CudaDriver {
#define KILN_DECLARE(name) decltype(&::name) name = nullptr;
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_DECLARE)
#undef KILN_DECLARE
  DynamicLibrary library;
  int version = 0;  // cuDriverGetVersion, e.g. 13000

  // "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)" style text.
  std::string describe(CUresult result) const;
  // Ok, or an error naming the call and the driver's explanation.
  Status check(CUresult result, const char* what) const;
};

// Loads libcuda.so.1 once per process and calls cuInit(0). The error says
// which library was missing and where it was looked for.
Result<const CudaDriver*> loadCudaDriver();

}  // namespace kiln::cuda
