// The GPU the executor runs on: the driver's entry points, the device, its
// primary context (retained while the executor lives) and the one stream
// every copy and launch goes on. Everything else the executor owns is
// released under this context before it goes, last: the stream, then the
// context's reference.
#pragma once

#include <string>

#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/executor/driver_extras.h"
#include "runtime/support/error.h"

namespace kiln::cuda {

struct DeviceContext {
  DeviceContext() = default;
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  // Retains GPU `index`'s primary context, makes it current and creates the
  // stream. An index the driver does not see: "no CUDA backend: ...".
  Status open(const CudaDriver& driver, int index);
  // Makes the context current and waits for the stream: the first thing
  // the executor does when it goes, before its owners release anything.
  void finish() const;
  int attribute(CUdevice_attribute attr) const;  // cuDeviceGetAttribute (0 if it fails)

  const CudaDriver* d = nullptr;  // set once the primary context is retained
  DriverExtras x;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  int major = 0, minor = 0;  // compute capability
  int sms = 1;               // streaming multiprocessors
  std::string arch;          // "sm_90"
  std::string name;          // "NVIDIA H200 (sm_90)"
};

}  // namespace kiln::cuda
