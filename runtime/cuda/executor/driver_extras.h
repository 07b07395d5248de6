// Driver entry points beyond the shared table in runtime/cuda/cuda_driver.h
// that only the executor uses (streams, async copies, pinned memory, memory
// info, graphs), resolved from the same libcuda handle.
#pragma once

#include "runtime/cuda/cuda_driver.h"
#include "runtime/support/error.h"

namespace kiln::cuda {

struct DriverExtras {
  decltype(&::cuStreamCreate) streamCreate = nullptr;
  decltype(&::cuStreamDestroy_v2) streamDestroy = nullptr;
  decltype(&::cuStreamSynchronize) streamSynchronize = nullptr;
  decltype(&::cuMemcpyHtoDAsync_v2) memcpyHtoDAsync = nullptr;
  decltype(&::cuMemcpyDtoHAsync_v2) memcpyDtoHAsync = nullptr;
  decltype(&::cuMemcpy2DAsync_v2) memcpy2DAsync = nullptr;
  decltype(&::cuMemAllocHost_v2) memAllocHost = nullptr;
  decltype(&::cuMemFreeHost) memFreeHost = nullptr;
  decltype(&::cuMemGetInfo_v2) memGetInfo = nullptr;
  decltype(&::cuMemsetD32Async) memsetD32Async = nullptr;
  decltype(&::cuStreamBeginCapture_v2) streamBeginCapture = nullptr;
  decltype(&::cuStreamEndCapture) streamEndCapture = nullptr;
  decltype(&::cuGraphInstantiateWithFlags) graphInstantiate = nullptr;
  decltype(&::cuGraphLaunch) graphLaunch = nullptr;
  decltype(&::cuGraphExecDestroy) graphExecDestroy = nullptr;
  decltype(&::cuGraphDestroy) graphDestroy = nullptr;
  // Optional (null when the driver lacks it): launches with attributes, for
  // programmatic dependent launch.
  decltype(&::cuLaunchKernelEx) launchKernelEx = nullptr;
};

inline Result<DriverExtras> loadExtras(const CudaDriver& d) {
  DriverExtras x;
  auto get = [&](auto& fn, const char* name) -> Status {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(d.library.symbol(name));
    if (!fn) return makeError("the CUDA driver at {} lacks {}", d.library.path(), name);
    return {};
  };
  KILN_RETURN_IF_ERROR(get(x.streamCreate, "cuStreamCreate"));
  KILN_RETURN_IF_ERROR(get(x.streamDestroy, "cuStreamDestroy_v2"));
  KILN_RETURN_IF_ERROR(get(x.streamSynchronize, "cuStreamSynchronize"));
  KILN_RETURN_IF_ERROR(get(x.memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"));
  KILN_RETURN_IF_ERROR(get(x.memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"));
  KILN_RETURN_IF_ERROR(get(x.memcpy2DAsync, "cuMemcpy2DAsync_v2"));
  KILN_RETURN_IF_ERROR(get(x.memAllocHost, "cuMemAllocHost_v2"));
  KILN_RETURN_IF_ERROR(get(x.memFreeHost, "cuMemFreeHost"));
  KILN_RETURN_IF_ERROR(get(x.memGetInfo, "cuMemGetInfo_v2"));
  KILN_RETURN_IF_ERROR(get(x.memsetD32Async, "cuMemsetD32Async"));
  KILN_RETURN_IF_ERROR(get(x.streamBeginCapture, "cuStreamBeginCapture_v2"));
  KILN_RETURN_IF_ERROR(get(x.streamEndCapture, "cuStreamEndCapture"));
  KILN_RETURN_IF_ERROR(get(x.graphInstantiate, "cuGraphInstantiateWithFlags"));
  KILN_RETURN_IF_ERROR(get(x.graphLaunch, "cuGraphLaunch"));
  KILN_RETURN_IF_ERROR(get(x.graphExecDestroy, "cuGraphExecDestroy"));
  KILN_RETURN_IF_ERROR(get(x.graphDestroy, "cuGraphDestroy"));
  x.launchKernelEx = reinterpret_cast<decltype(x.launchKernelEx)>(d.library.symbol("cuLaunchKernelEx"));
  return x;
}

// Launches `fn` as a programmatic dependent of the launch before it on
// `stream` (programmatic stream serialization): its blocks may start before
// that launch ends. Every generated kernel waits for its predecessor's
// writes itself (wait_for_previous_kernel, codegen/kernels/common.cuh).
// Needs x.launchKernelEx.
inline CUresult launchProgrammatic(const DriverExtras& x, CUfunction fn, unsigned gx, unsigned gy, unsigned gz,
                                   unsigned block, unsigned smem, CUstream stream, void** args) {
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig config{};
  config.gridDimX = gx, config.gridDimY = gy, config.gridDimZ = gz;
  config.blockDimX = block, config.blockDimY = 1, config.blockDimZ = 1;
  config.sharedMemBytes = smem;
  config.hStream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  return x.launchKernelEx(&config, fn, args, nullptr);
}

}  // namespace kiln::cuda
