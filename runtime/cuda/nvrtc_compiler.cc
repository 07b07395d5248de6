#include "runtime/cuda/nvrtc_compiler.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <regex>

#include <unistd.h>

#include "runtime/support/data_dir.h"

namespace kiln::cuda {

std::string Nvrtc::versionText() const { return fmt::format("{}.{}", major, minor); }

namespace {

Result<Nvrtc*> load() {
  std::vector<std::string> candidates;
  for (const char* soname : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"})
    for (std::string& c : toolkitCandidates(soname)) candidates.push_back(std::move(c));
  auto lib = DynamicLibrary::open("NVRTC (libnvrtc.so.13, the CUDA runtime compiler)", candidates);
  if (!lib) return lib.error();
  auto* nvrtc = new Nvrtc();  // lives for the process
  nvrtc->library = lib.take();
#define KILN_RESOLVE(name)                                                                   \
  nvrtc->name = reinterpret_cast<decltype(nvrtc->name)>(nvrtc->library.symbol(#name));      \
  if (!nvrtc->name) return makeError("NVRTC at {} lacks {}", nvrtc->library.path(), #name);
  KILN_NVRTC_FUNCTIONS(KILN_RESOLVE)
#undef KILN_RESOLVE
  nvrtc->nvrtcVersion(&nvrtc->major, &nvrtc->minor);
  // NVRTC dlopens libnvrtc-builtins by soname; preloading it from NVRTC's own
  // folder makes that work without LD_LIBRARY_PATH.
  const std::filesystem::path folder = std::filesystem::path(nvrtc->library.path()).parent_path();
  const std::string builtins = fmt::format("libnvrtc-builtins.so.{}.{}", nvrtc->major, nvrtc->minor);
  std::vector<std::string> builtin_candidates = {builtins};
  if (!folder.empty()) builtin_candidates.insert(builtin_candidates.begin(), (folder / builtins).string());
  auto b = DynamicLibrary::open("NVRTC's builtins (" + builtins + ")", builtin_candidates);
  if (b) nvrtc->builtins = b.take();  // otherwise NVRTC reports it at compile time
  return nvrtc;
}

}  // namespace

Result<const Nvrtc*> loadNvrtc() {
  static std::once_flag once;
  static Result<Nvrtc*>* loaded = nullptr;
  std::call_once(once, [] { loaded = new Result<Nvrtc*>(load()); });
  if (!loaded->ok()) return loaded->error();
  return static_cast<const Nvrtc*>(loaded->value());
}

ResourceUsage parseResourceUsage(const std::string& log, const std::string& entry) {
  ResourceUsage usage;
  // ptxas prints, per entry:
  //   ptxas info    : Compiling entry function 'NAME' for 'sm_90'
  //   ptxas info    : Function properties for NAME
  //       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
  //   ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 400 bytes cmem[0]
  const std::string start = "Compiling entry function '" + entry + "'";
  size_t pos = log.find(start);
  if (pos == std::string::npos) pos = log.find("Function properties for " + entry);
  if (pos == std::string::npos) return usage;
  size_t stop = log.find("Compiling entry function", pos + start.size());
  const std::string block = log.substr(pos, stop == std::string::npos ? std::string::npos : stop - pos);
  std::smatch m;
  static const std::regex frame(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  static const std::regex barriers(R"(used (\d+) barriers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  static const std::regex cmem(R"((\d+) bytes cmem\[0\])");
  if (std::regex_search(block, m, frame)) {
    usage.stack_bytes = std::stoi(m[1]);
    usage.spill_stores = std::stoi(m[2]);
    usage.spill_loads = std::stoi(m[3]);
  }
  if (std::regex_search(block, m, used)) {
    usage.registers = std::stoi(m[1]);
    usage.found = true;
  }
  if (std::regex_search(block, m, barriers)) usage.barriers = std::stoi(m[1]);
  if (std::regex_search(block, m, smem)) usage.shared_bytes = std::stoi(m[1]);
  if (std::regex_search(block, m, cmem)) usage.constant_bytes = std::stoi(m[1]);
  return usage;
}

std::vector<std::string> nvrtcOptions(const CompileOptions& options, bool for_cubin) {
  std::string arch = options.arch;
  if (!for_cubin && arch.rfind("sm_", 0) == 0) arch = "compute_" + arch.substr(3);
  std::vector<std::string> out = {"--gpu-architecture=" + arch, "-default-device", "--std=c++17",
                                  "-lineinfo"};
  if (for_cubin) out.push_back("--ptxas-options=-v");
  for (const std::string& dir : options.include_dirs) out.push_back("--include-path=" + dir);
  for (const std::string& e : options.extra) out.push_back(e);
  return out;
}

namespace {

struct Program {
  const Nvrtc* nvrtc;
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle) nvrtc->nvrtcDestroyProgram(&handle);
  }
};

// One NVRTC compile; fills ptx or cubin and appends the log.
Status compileOnce(const Nvrtc& nvrtc, const std::string& name, const std::string& source,
                   const std::vector<std::string>& options, bool cubin, CompiledKernel& out) {
  Program program{&nvrtc};
  const std::string file = name + ".cu";
  // A unique empty kernel appended: on the GPU machine (driver present),
  // repeating a compile whose PTX was seen before -- even from another
  // process -- came back without ptxas' resource report (CUDA 13.0), so
  // some PTX-keyed cache answered it. A comment did not
  // help (comments leave the PTX unchanged); a distinct entry changes the
  // PTX. kiln caches compiles itself (kernel_cache.h).
  static std::atomic<uint64_t> serial{0};
  const std::string text = fmt::format(
      "{}\nextern \"C\" __global__ void kiln_compile_{}_{}_{}() {{}}\n", source, ::getpid(), serial++,
      std::chrono::steady_clock::now().time_since_epoch().count());
  nvrtcResult r = nvrtc.nvrtcCreateProgram(&program.handle, text.c_str(), file.c_str(), 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS)
    return makeError("kernel {}: nvrtcCreateProgram failed: {}", name, nvrtc.nvrtcGetErrorString(r));
  std::vector<const char*> argv;
  for (const std::string& o : options) argv.push_back(o.c_str());
  r = nvrtc.nvrtcCompileProgram(program.handle, int(argv.size()), argv.data());
  size_t log_size = 0;
  nvrtc.nvrtcGetProgramLogSize(program.handle, &log_size);
  std::string log(log_size, '\0');
  if (log_size) nvrtc.nvrtcGetProgramLog(program.handle, log.data());
  while (!log.empty() && log.back() == '\0') log.pop_back();
  out.log += log;
  if (r != NVRTC_SUCCESS) {
    std::string joined;
    for (const std::string& o : options) joined += " " + o;
    // A missing template is most often a binary moved without its share/kiln.
    const std::string hint =
        log.find("cannot open source file") == std::string::npos
            ? ""
            : fmt::format("\n(kernel templates are read from {}: share/kiln/kernels beside the executable's "
                          "folder, or $KILN_KERNELS_DIR)",
                          kernelTemplatesDir().string());
    return makeError("kernel {} failed to compile ({}) with NVRTC {}.{} and options{}:\n{}{}", name,
                     nvrtc.nvrtcGetErrorString(r), nvrtc.major, nvrtc.minor, joined, log, hint);
  }
  size_t size = 0;
  if (cubin) {
    nvrtc.nvrtcGetCUBINSize(program.handle, &size);
    out.cubin.resize(size);
    nvrtc.nvrtcGetCUBIN(program.handle, out.cubin.data());
  } else {
    nvrtc.nvrtcGetPTXSize(program.handle, &size);
    out.ptx.resize(size);
    nvrtc.nvrtcGetPTX(program.handle, out.ptx.data());
    while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  }
  return Status::success();
}

}  // namespace

Result<CompiledKernel> compileKernel(const std::string& name, const std::string& source,
                                     const CompileOptions& options) {
  auto nvrtc = loadNvrtc();
  if (!nvrtc) return makeError("kernel {}: {}", name, nvrtc.error().message);
  CompiledKernel out;
  out.name = name;
  if (options.ptx)
    KILN_RETURN_IF_ERROR(compileOnce(**nvrtc, name, source, nvrtcOptions(options, false), false, out));
  if (options.cubin) {
    KILN_RETURN_IF_ERROR(compileOnce(**nvrtc, name, source, nvrtcOptions(options, true), true, out));
    out.resources = parseResourceUsage(out.log, name);
  }
  return out;
}

std::vector<std::string> defaultKernelIncludeDirs() {
  std::vector<std::string> dirs;
  dirs.push_back(kernelTemplatesDir().string());
  // cuda_bf16.h / cuda_fp16.h: the toolkit's include folder, found next to
  // the NVRTC that was loaded first, then the usual roots.
  std::vector<std::filesystem::path> roots;
  if (auto nvrtc = loadNvrtc(); nvrtc.ok()) {
    const std::filesystem::path lib = std::filesystem::path((*nvrtc)->library.path()).parent_path();
    roots.push_back(lib.parent_path() / "include");
    roots.push_back(lib.parent_path().parent_path() / "include");
  }
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* root = std::getenv(var); root && *root) roots.push_back(std::filesystem::path(root) / "include");
  roots.push_back("/usr/local/cuda/include");
  std::error_code ec;
  for (const auto& root : roots)
    if (std::filesystem::exists(root / "cuda_bf16.h", ec)) {
      dirs.push_back(std::filesystem::canonical(root, ec).string());
      break;
    }
  return dirs;
}

}  // namespace kiln::cuda
