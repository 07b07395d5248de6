#include "runtime/cuda/kernel_cache.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "runtime/support/cache_entry.h"
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

// The payload of a .kjit cache entry: cubin, log and PTX, each as a
// little-endian u64 length and its bytes.
std::string encodeKernel(const CompiledKernel& k) {
  std::string out;
  for (const std::string* part : {&k.cubin, &k.log, &k.ptx}) {
    for (int i = 0; i < 8; ++i) out.push_back(char((uint64_t(part->size()) >> (8 * i)) & 0xff));
    out += *part;
  }
  return out;
}

bool decodeKernel(std::string_view bytes, CompiledKernel& k) {
  for (std::string* part : {&k.cubin, &k.log, &k.ptx}) {
    if (bytes.size() < 8) return false;
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(bytes[size_t(i)])) << (8 * i);
    bytes.remove_prefix(8);
    if (n > bytes.size()) return false;
    part->assign(bytes.substr(0, n));
    bytes.remove_prefix(n);
  }
  return bytes.empty();
}

// Kernels compiled in this process whose cache entry could not be written
// (unwritable folder, full disk): later loads in the process still hit.
struct MemoryCache {
  std::mutex mutex;
  std::map<std::string, CompiledKernel> kernels;  // by entry path
};
MemoryCache& memoryCache() {
  static MemoryCache cache;
  return cache;
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
  const std::string version = (*nvrtc)->versionText();
  // A cache folder that cannot be made or written costs this run its disk
  // cache, never the run: one warning, and the kernels stay in memory.
  std::atomic<bool> disk_ok{true};
  std::mutex warn_mutex;
  auto warnOnce = [&](const std::string& why) {
    std::lock_guard<std::mutex> lock(warn_mutex);
    if (!disk_ok.exchange(false))
      return;
    std::fprintf(stderr, "%skiln jit: warning: %s; compiled kernels are kept in memory for this process only\n",
                 options.progress ? "\n" : "", why.c_str());
  };
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) warnOnce(fmt::format("cannot create the JIT cache folder {}: {}", options.dir.string(), ec.message()));
  else removeStaleCacheTemps(options.dir);

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
      const std::string key = kernelCacheKey(k, options, version);
      const fs::path path = options.dir / (k.name.substr(0, 128) + "-" + key + ".kjit");
      CompiledKernel hit;
      hit.name = k.name;
      bool found = false;
      {
        MemoryCache& memory = memoryCache();
        std::lock_guard<std::mutex> lock(memory.mutex);
        if (auto it = memory.kernels.find(path.string()); it != memory.kernels.end()) {
          hit = it->second;
          found = true;
        }
      }
      if (!found) {
        CacheLookup entry = readCacheEntry(path, key);
        if (entry.state == CacheLookup::State::kHit) {
          found = decodeKernel(entry.payload, hit) && !hit.cubin.empty() &&
                  (!options.compile.ptx || !hit.ptx.empty());
          if (!found) {  // whole (the checksum holds) but not what this build writes
            reportRejectedCacheEntry(path, "its payload is not a cubin, log and PTX");
            std::error_code remove_ec;
            fs::remove(path, remove_ec);
          }
        }
      }
      if (found) {
        hit.resources = parseResourceUsage(hit.log, k.name);
        summary.kernels[i] = std::move(hit);
        ++cached;
      } else {
        auto compiled = compileKernel(k.name, k.source, options.compile);
        if (!compiled) {
          errors[i] = compiled.error().message;
        } else {
          if (disk_ok) {
            Status written = writeCacheEntry(path, key, encodeKernel(*compiled));
            if (!written.ok()) warnOnce(written.error().message);
          }
          if (!disk_ok) {
            MemoryCache& memory = memoryCache();
            std::lock_guard<std::mutex> lock(memory.mutex);
            memory.kernels[path.string()] = *compiled;
          }
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
