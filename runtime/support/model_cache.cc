#include "runtime/support/model_cache.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace fs = std::filesystem;

namespace kiln {

std::string kilnHome() {
  if (const char* home = std::getenv("KILN_HOME"); home && *home) return home;
  const char* user = std::getenv("HOME");
  return std::string(user ? user : ".") + "/.cache/kiln";
}

Result<std::string> resolveModel(const std::string& name_or_path) {
  std::error_code ec;
  if (fs::exists(name_or_path, ec)) return name_or_path;
  fs::path models = fs::path(kilnHome()) / "models";
  fs::path dir = models / name_or_path;
  if (name_or_path.find('/') == std::string::npos && fs::is_directory(dir, ec)) {
    if (fs::exists(dir / "config.json", ec)) return dir.string();
    std::vector<fs::path> ggufs;
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.path().extension() == ".gguf") ggufs.push_back(entry.path());
    if (ggufs.size() == 1) return ggufs.front().string();
    return makeError("model '{}': {} holds {} .gguf files, expected exactly one "
                     "(or a config.json)",
                     name_or_path, dir.string(), ggufs.size());
  }
  std::string known;
  for (const auto& entry : fs::directory_iterator(models, ec))
    if (entry.is_directory())
      known += (known.empty() ? "" : ", ") + entry.path().filename().string();
  return makeError(
      "model '{}' is neither a file or directory nor a model in the cache {} "
      "(cached models: {}); run scripts/setup.sh to fetch smollm2",
      name_or_path, models.string(), known.empty() ? "none" : known);
}

}  // namespace kiln
