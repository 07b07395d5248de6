#include "runtime/cuda/kernel_cache.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "runtime/support/model_cache.h"

namespace kiln::cuda {
namespace fs = std::filesystem;

namespace {

// Two FNV-1a 64 streams with different offsets: a 128-bit content key (not a
// security boundary; the cache directory is the user's own).
struct Hasher {
  uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  void add(std::string_view text) {
    for (unsigned char c : text) {
      a = (a ^ c) * 0x100000001b3ull;
      b = (b ^ c) * 0x100000001b3ull;
      b ^= b >> 29;
    }
    // A separator, so ("ab","c") and ("a","bc") differ.
    a = (a ^ 0xff) * 0x100000001b3ull;
    b = (b ^ 0xfe) * 0x100000001b3ull;
  }
  std::string hex() const { return fmt::format("{:016x}{:016x}", a, b); }
};

std::string readFile(const fs::path& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = bool(in);
  std::stringstream ss;
  if (in) ss << in.rdbuf();
  return ss.str();
}

Status writeFileAtomically(const fs::path& path, const std::string& data) {
  const fs::path tmp = path.string() + fmt::format(".tmp{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << data;
    if (!out) return makeError("{}: cannot write the JIT cache file", tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return makeError("{}: cannot rename into the JIT cache: {}", path.string(), ec.message());
  return Status::success();
}

// Text of every header in the include folders, in name order.
std::string headersText(const std::vector<std::string>& dirs) {
  std::string all;
  for (const std::string& dir : dirs) {
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".cuh" || e.path().extension() == ".h") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      bool ok = false;
      all += f.filename().string() + "\n" + readFile(f, &ok);
    }
  }
  return all;
}

}  // namespace

fs::path defaultJitCacheDir() { return fs::path(kilnHome()) / "jit"; }

std::string kernelCacheKey(const KernelSource& kernel, const KernelCacheOptions& options,
                           const std::string& nvrtc_version) {
  Hasher h;
  h.add(kernel.source);
  for (const std::string& o : nvrtcOptions(options.compile, true)) h.add(o);
  h.add(options.compile.arch);
  h.add(options.compile.ptx ? "ptx" : "noptx");
  h.add(nvrtc_version);
  h.add(headersText(options.compile.include_dirs));
  return h.hex();
}

Result<CompileSummary> compileKernels(const std::vector<KernelSource>& kernels,
                                      KernelCacheOptions options) {
  if (options.dir.empty()) options.dir = defaultJitCacheDir();
  if (options.compile.include_dirs.empty()) options.compile.include_dirs = defaultKernelIncludeDirs();
  auto nvrtc = loadNvrtc();
  if (!nvrtc) return nvrtc.error();
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) return makeError("{}: cannot create the JIT cache folder: {}", options.dir.string(), ec.message());
  const std::string version = (*nvrtc)->versionText();

  CompileSummary summary;
  summary.kernels.resize(kernels.size());
  std::vector<std::string> errors(kernels.size());
  std::atomic<size_t> next{0};
  std::atomic<int> done{0}, cached{0};
  std::mutex print_mutex;
  const bool progress = options.progress && !kernels.empty();
  auto report = [&] {
    if (!progress) return;
    std::lock_guard<std::mutex> lock(print_mutex);
    const int d = done.load(), total = int(kernels.size());
    const int width = 30, filled = total ? d * width / total : width;
    std::fprintf(stderr, "\r[kiln jit] [%s%s] %d/%d kernels (%d cached)", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), d, total, cached.load());
    if (d == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
  auto work = [&] {
    for (size_t i = next++; i < kernels.size(); i = next++) {
      const KernelSource& k = kernels[i];
      // The key already names the source; the instance name is only for a
      // reader of the folder, cut so the file name stays under NAME_MAX.
      const std::string stem = k.name.substr(0, 128) + "-" + kernelCacheKey(k, options, version);
      const fs::path base = options.dir / stem;
      bool have_cubin = false, have_log = false, have_ptx = !options.compile.ptx;
      CompiledKernel hit;
      hit.name = k.name;
      hit.cubin = readFile(base.string() + ".cubin", &have_cubin);
      hit.log = readFile(base.string() + ".log", &have_log);
      if (options.compile.ptx) hit.ptx = readFile(base.string() + ".ptx", &have_ptx);
      if (have_cubin && have_log && have_ptx && !hit.cubin.empty()) {
        hit.resources = parseResourceUsage(hit.log, k.name);
        summary.kernels[i] = std::move(hit);
        ++cached;
      } else {
        auto compiled = compileKernel(k.name, k.source, options.compile);
        if (!compiled) {
          errors[i] = compiled.error().message;
        } else {
          Status s = writeFileAtomically(base.string() + ".cubin", compiled->cubin);
          if (s.ok()) s = writeFileAtomically(base.string() + ".log", compiled->log);
          if (s.ok() && options.compile.ptx) s = writeFileAtomically(base.string() + ".ptx", compiled->ptx);
          if (!s.ok()) errors[i] = s.error().message;
          summary.kernels[i] = compiled.take();
        }
      }
      ++done;
      report();
    }
  };
  int threads = options.threads > 0 ? options.threads : int(std::thread::hardware_concurrency());
  threads = std::max(1, std::min<int>(threads, int(kernels.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();

  std::string failed;
  int failures = 0;
  for (const std::string& e : errors)
    if (!e.empty()) {
      failed += "\n" + e;
      ++failures;
    }
  if (failures) return makeError("{} of {} kernels failed to compile:{}", failures, kernels.size(), failed);
  summary.cached = cached.load();
  summary.compiled = int(kernels.size()) - summary.cached;
  return summary;
}

}  // namespace kiln::cuda
