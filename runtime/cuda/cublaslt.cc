#include "runtime/cuda/cublaslt.h"

#include <mutex>

namespace kiln::cuda {
namespace {

Result<CublasLt*> load() {
  std::vector<std::string> candidates;
  for (const char* soname : {"libcublasLt.so.13", "libcublasLt.so.12"})
    for (std::string& c : toolkitCandidates(soname)) candidates.push_back(std::move(c));
  auto lib = DynamicLibrary::open("cuBLASLt (libcublasLt.so.13)", candidates);
  if (!lib) return lib.error();
  auto* lt = new CublasLt();  // lives for the process
  lt->library = lib.take();
#define KILN_RESOLVE(name)                                                          \
  lt->name = reinterpret_cast<decltype(lt->name)>(lt->library.symbol(#name));      \
  if (!lt->name) return makeError("cuBLASLt at {} lacks {}", lt->library.path(), #name);
  KILN_CUBLASLT_FUNCTIONS(KILN_RESOLVE)
#undef KILN_RESOLVE
  lt->version = lt->cublasLtGetVersion();
  return lt;
}

}  // namespace

Result<const CublasLt*> loadCublasLt() {
  static std::once_flag once;
  static Result<CublasLt*>* loaded = nullptr;
  std::call_once(once, [] { loaded = new Result<CublasLt*>(load()); });
  if (!loaded->ok()) return loaded->error();
  return static_cast<const CublasLt*>(loaded->value());
}

}  // namespace kiln::cuda
