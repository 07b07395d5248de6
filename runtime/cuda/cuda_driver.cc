#include "runtime/cuda/cuda_driver.h"

#include <mutex>

namespace kiln::cuda {

std::string CudaDriver::describe(CUresult result) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName) cuGetErrorName(result, &name);
  if (cuGetErrorString) cuGetErrorString(result, &text);
  return fmt::format("{} ({})", name ? name : "CUDA_ERROR_?", text ? text : "no description");
}

Status CudaDriver::check(CUresult result, const char* what) const {
  if (result == CUDA_SUCCESS) return Status::success();
  return makeError("{}: {}", what, describe(result));
}

namespace {

Result<CudaDriver*> load() {
  auto lib = DynamicLibrary::open("the CUDA driver (libcuda.so.1)", {"libcuda.so.1", "libcuda.so"});
  if (!lib) return lib.error();
  auto* driver = new CudaDriver();  // lives for the process
  driver->library = lib.take();
#define KILN_RESOLVE(name)                                                                    \
  driver->name = reinterpret_cast<decltype(driver->name)>(driver->library.symbol(#name));    \
  if (!driver->name)                                                                          \
    return makeError("the CUDA driver at {} lacks {}: a driver for CUDA 12 or newer is needed", \
                     driver->library.path(), #name);
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_RESOLVE)
#undef KILN_RESOLVE
  if (Status s = driver->check(driver->cuInit(0), "cuInit"); !s.ok())
    return makeError("the CUDA driver at {} did not initialize: {}", driver->library.path(), s.error().message);
  driver->cuDriverGetVersion(&driver->version);
  return driver;
}

}  // namespace

Result<const CudaDriver*> loadCudaDriver() {
  static std::once_flag once;
  static Result<CudaDriver*>* loaded = nullptr;
  std::call_once(once, [] { loaded = new Result<CudaDriver*>(load()); });
  if (!loaded->ok()) return loaded->error();
  return static_cast<const CudaDriver*>(loaded->value());
}

}  // namespace kiln::cuda
