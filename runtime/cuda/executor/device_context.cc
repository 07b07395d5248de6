#include "runtime/cuda/executor/device_context.h"

#include <fmt/format.h>

#include "runtime/cuda/executor/kiln_assign.h"

namespace kiln::cuda {

Status DeviceContext::open(const CudaDriver& driver, int index) {
  KILN_ASSIGN(extras, loadExtras(driver));
  int count = 0;
  KILN_RETURN_IF_ERROR(driver.check(driver.cuDeviceGetCount(&count), "cuDeviceGetCount"));
  if (count <= index)
    return makeError("no CUDA backend: the driver at {} sees {} GPU(s), device {} was asked for",
                     driver.library.path(), count, index);
  x = extras;
  KILN_RETURN_IF_ERROR(driver.check(driver.cuDeviceGet(&device, index), "cuDeviceGet"));
  KILN_RETURN_IF_ERROR(driver.check(driver.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain"));
  d = &driver;
  KILN_RETURN_IF_ERROR(d->check(d->cuCtxSetCurrent(context), "cuCtxSetCurrent"));
  KILN_RETURN_IF_ERROR(d->check(x.streamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"));
  major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  char device_name[256] = {0};
  d->cuDeviceGetName(device_name, sizeof device_name, device);
  arch = fmt::format("sm_{}{}", major, minor);
  d->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);  // stays 1 if it fails
  name = fmt::format("{} ({})", device_name, arch);
  return {};
}

void DeviceContext::finish() const {
  if (!d) return;
  d->cuCtxSetCurrent(context);
  if (stream) x.streamSynchronize(stream);
}

int DeviceContext::attribute(CUdevice_attribute attr) const {
  int value = 0;
  d->cuDeviceGetAttribute(&value, attr, device);
  return value;
}

DeviceContext::~DeviceContext() {
  if (!d) return;
  if (stream) x.streamDestroy(stream);
  if (context) d->cuDevicePrimaryCtxRelease_v2(device);
}

}  // namespace kiln::cuda
