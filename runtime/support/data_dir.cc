#include "runtime/support/data_dir.h"

#include <cstdlib>
#include <system_error>

namespace kiln {

std::filesystem::path executablePath() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec);
}

std::filesystem::path dataDir() {
  return (executablePath().parent_path() / ".." / "share" / "kiln").lexically_normal();
}

std::filesystem::path kernelTemplatesDir() {
  if (const char* dir = std::getenv("KILN_KERNELS_DIR"); dir && *dir) return dir;
  return dataDir() / "kernels";
}

Result<std::filesystem::path> helperScript(std::string_view name) {
  const std::filesystem::path script = dataDir() / "scripts" / name;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(script, ec))
    return makeError("{} not found at {} (kiln's helper scripts sit in share/kiln/scripts beside its bin/ folder)",
                     name, script.string());
  return script;
}

}  // namespace kiln
