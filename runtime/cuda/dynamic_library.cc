#include "runtime/cuda/dynamic_library.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <utility>

namespace kiln::cuda {

DynamicLibrary::DynamicLibrary(DynamicLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), path_(std::move(other.path_)) {}

DynamicLibrary& DynamicLibrary::operator=(DynamicLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_) dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

// Libraries stay loaded for the process: CUDA libraries must not be unloaded
// while the driver may still call back into them.
DynamicLibrary::~DynamicLibrary() = default;

Result<DynamicLibrary> DynamicLibrary::open(const std::string& what,
                                            const std::vector<std::string>& candidates) {
  std::string tried;
  for (const std::string& candidate : candidates) {
    dlerror();
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = dlerror();
      tried += fmt::format("\n  {}: {}", candidate, why ? why : "not found");
      continue;
    }
    DynamicLibrary lib;
    lib.handle_ = handle;
    lib.path_ = candidate;
    struct link_map* map = nullptr;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name)
      lib.path_ = map->l_name;
    return lib;
  }
  return makeError("{} could not be loaded; tried:{}", what, tried);
}

void* DynamicLibrary::symbol(const char* name) const {
  return handle_ ? dlsym(handle_, name) : nullptr;
}

std::vector<std::string> toolkitCandidates(const std::string& soname) {
  std::vector<std::string> out = {soname};
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* root = std::getenv(var); root && *root) out.push_back(std::string(root) + "/lib64/" + soname);
  out.push_back("/usr/local/cuda/lib64/" + soname);
  out.push_back("/usr/local/cuda/lib/" + soname);
  return out;
}

}  // namespace kiln::cuda
