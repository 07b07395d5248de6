#include "tools/kiln/compile_cache.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>

#include <fmt/format.h>

#include "runtime/support/cache_entry.h"
#include "runtime/support/content_hash.h"
#include "runtime/support/model_cache.h"
#include "tools/kiln/artifact_seal.h"

namespace fs = std::filesystem;

namespace kiln {

std::string executableDir() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : self.parent_path().string();
}

namespace {

// Size and mtime of a file, or of a directory's files, and each file's
// sampled content hash (runtime/support/content_hash.h: ~6 MiB read per
// file), as text: a model replaced under the same size and mtime gets a new
// key, so it is compiled again instead of meeting an artifact that refuses it.
std::string identity(const fs::path& path) {
  std::error_code ec;
  uint64_t size = 0;
  int64_t newest = 0;
  std::string hashes;
  auto account = [&](const fs::path& file) {
    size += fs::file_size(file, ec);
    auto t = fs::last_write_time(file, ec).time_since_epoch();
    newest = std::max<int64_t>(newest, std::chrono::duration_cast<std::chrono::seconds>(t).count());
    auto hash = sampledContentHash(file.string());
    hashes += ":" + (hash.ok() ? *hash : std::string("unreadable"));
  };
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(path, ec))
      if (entry.is_regular_file()) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) account(file);
  } else {
    account(path);
  }
  return fmt::format("{}:{}:{}{}", fs::absolute(path, ec).string(), size, newest, hashes);
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
  const fs::path artifacts = fs::path(kilnHome()) / "artifacts";
  fs::path cache = artifacts / (fs::path(*model).stem().string() + "-" + key);
  // A cached artifact is used only when its seal proves it whole and made
  // for this key; anything else is reported, removed and compiled again.
  if (fs::exists(cache, ec)) {
    const std::string problem = artifactProblem(cache, key_text);
    if (problem.empty()) return cache.string();
    reportRejectedCacheEntry(cache, problem);
    fs::remove_all(cache, ec);
  }

  // The cache is where kiln-compile writes: it must be writable.
  auto unwritable = [&](const std::string& why) {
    return makeError("cannot write the compiled-artifact cache {}: {}; set KILN_HOME to a writable folder, or "
                     "compile with `kiln-compile {} -o DIR` and pass DIR",
                     artifacts.string(), why, *model);
  };
  fs::create_directories(artifacts, ec);
  if (ec) return unwritable(ec.message());
  removeStaleCacheTemps(artifacts);
  const fs::path staging = cacheTempPath(cache);
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
  if (Status sealed = sealArtifact(staging, key_text); !sealed.ok()) {
    fs::remove_all(staging, ec);
    return unwritable(sealed.error().message);
  }
  fs::rename(staging, cache, ec);
  if (ec) {
    fs::remove_all(staging, ec);
    // Another process compiled the same model at the same time and renamed
    // its artifact first: use that one, once it proves whole.
    if (artifactProblem(cache, key_text).empty()) return cache.string();
    return unwritable(fmt::format("cannot move the artifact into place as {}", cache.string()));
  }
  return cache.string();
}

}  // namespace kiln
