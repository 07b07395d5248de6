#include "tools/kiln/compile_cache.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>

#include <fmt/format.h>

#include "runtime/support/model_cache.h"

namespace fs = std::filesystem;

namespace kiln {

std::string executableDir() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : self.parent_path().string();
}

namespace {

// Size and mtime of a file, or of a directory's files, as text.
std::string identity(const fs::path& path) {
  std::error_code ec;
  uint64_t size = 0;
  int64_t newest = 0;
  auto account = [&](const fs::path& file) {
    size += fs::file_size(file, ec);
    auto t = fs::last_write_time(file, ec).time_since_epoch();
    newest = std::max<int64_t>(newest, std::chrono::duration_cast<std::chrono::seconds>(t).count());
  };
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::directory_iterator(path, ec))
      if (entry.is_regular_file()) account(entry.path());
  } else {
    account(path);
  }
  return fmt::format("{}:{}:{}", fs::absolute(path, ec).string(), size, newest);
}

// Runs argv, returning its exit status (stdout/stderr pass through).
int runProcess(const std::vector<std::string>& argv) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    // kiln-compile prints its own errors on stderr; keep stdout for results.
    dup2(STDERR_FILENO, STDOUT_FILENO);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "kiln: cannot run %s\n", args[0]);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

Result<std::string> artifactFor(const CompileRequest& request) {
  std::error_code ec;
  fs::path direct(request.model);
  if (fs::is_directory(direct, ec) && fs::exists(direct / "manifest.json", ec))
    return direct.string();
  auto model = resolveModel(request.model);
  if (!model.ok()) return model.error();

  fs::path compiler = fs::path(executableDir()) / "kiln-compile";
  if (!fs::exists(compiler, ec))
    return makeError("kiln-compile not found next to kiln (expected {}); build it or pass "
                     "a compiled artifact directory",
                     compiler.string());
  std::string key_text = identity(*model) + "|" + identity(compiler);
  for (const std::string& flag : request.compile_flags) key_text += "|" + flag;
  std::string key = fmt::format("{:016x}", std::hash<std::string>{}(key_text));
  fs::path cache = fs::path(kilnHome()) / "artifacts" /
                   (fs::path(*model).stem().string() + "-" + key);
  if (fs::exists(cache / "manifest.json", ec)) return cache.string();

  fs::create_directories(cache.parent_path(), ec);
  fs::path staging = cache.string() + ".tmp" + std::to_string(getpid());
  if (request.progress)
    std::fprintf(stderr, "kiln: compiling %s (first use; cached in %s)\n", model->c_str(),
                 cache.c_str());
  std::vector<std::string> argv = {compiler.string(), *model, "-o", staging.string()};
  argv.insert(argv.end(), request.compile_flags.begin(), request.compile_flags.end());
  int status = runProcess(argv);
  if (status != 0) {
    fs::remove_all(staging, ec);
    return makeError("compiling {} failed (kiln-compile exit status {}); its message is above",
                     *model, status);
  }
  fs::rename(staging, cache, ec);
  if (ec && !fs::exists(cache / "manifest.json")) {
    return makeError("cannot move the artifact into the cache {}: {}", cache.string(),
                     ec.message());
  }
  fs::remove_all(staging, ec);
  return cache.string();
}

}  // namespace kiln
