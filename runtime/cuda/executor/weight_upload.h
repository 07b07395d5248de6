// Copies weights from host memory (the mapped checkpoint, or buffers made at
// load) to their device addresses. A plain cuMemcpyHtoD from pageable memory
// faults the mapped file in and stages it through the driver one page run at
// a time, on one thread: a small part of what the link carries.
// Here several threads each copy chunks into their own pinned buffers (the
// page faults proceed in parallel) and queue async copies on their own
// stream, double-buffered, so faulting, staging and DMA overlap.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cuda/executor/driver_extras.h"
#include "runtime/support/error.h"

namespace kiln::cuda {

struct HostToDeviceCopy {
  const uint8_t* src = nullptr;
  uint64_t bytes = 0;
  CUdeviceptr dst = 0;
};

struct UploadOptions {
  int threads = 8;
  uint64_t chunk_bytes = uint64_t(16) << 20;
  bool progress = false;  // a bytes/s progress line on stderr
};

// Runs every copy; returns once all have landed on the device. The context
// must be the one `dst` addresses belong to. Errors name the failing call.
Status uploadToDevice(const CudaDriver& d, const DriverExtras& x, CUcontext context,
                      const std::vector<HostToDeviceCopy>& copies, const UploadOptions& options = {});

}  // namespace kiln::cuda
