// A small harness for the GPU correctness tests: the dlopen'd driver, one
// context, device buffers poisoned with NaN, bf16/f16 host conversions, and
// NVRTC-compiled kernel instances from codegen/cuda.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codegen/cuda/instance_source.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/nvrtc_compiler.h"

namespace kiln::gpu_test {

inline uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return uint16_t(u >> 16);
}
inline float fromBf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float roundBf16(float f) { return fromBf16(toBf16(f)); }
inline uint16_t toF16(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
inline float fromF16(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

// Fails the current test with the message if `status` is an error.
#define KILN_GPU_OK(expr)                                                   \
  do {                                                                      \
    auto kiln_s_ = (expr);                                                  \
    ASSERT_TRUE(kiln_s_.ok()) << kiln_s_.error().message;                  \
  } while (0)

class Gpu {
 public:
  // The process-wide device 0 context, or an error saying why there is none.
  static Result<Gpu*> get() {
    static Result<Gpu*>* gpu = nullptr;
    if (!gpu) {
      auto driver = cuda::loadCudaDriver();
      if (!driver) gpu = new Result<Gpu*>(driver.error());
      else {
        auto* g = new Gpu();
        g->d = *driver;
        Status s = g->d->check(g->d->cuDeviceGet(&g->device, 0), "cuDeviceGet");
        if (s.ok()) s = g->d->check(g->d->cuDevicePrimaryCtxRetain(&g->context, g->device), "cuDevicePrimaryCtxRetain");
        if (s.ok()) s = g->d->check(g->d->cuCtxSetCurrent(g->context), "cuCtxSetCurrent");
        char name[256] = {0};
        if (s.ok()) g->d->cuDeviceGetName(name, sizeof name, g->device);
        g->name = name;
        gpu = s.ok() ? new Result<Gpu*>(g) : new Result<Gpu*>(s.error());
      }
    }
    if (!gpu->ok()) return gpu->error();
    return gpu->value();
  }

  const cuda::CudaDriver* d = nullptr;
  CUdevice device = 0;
  CUcontext context = nullptr;
  std::string name;
};

// Milliseconds `launches` takes on the GPU, between two events on the
// default stream.
template <class Launches>
double eventTimedMs(const cuda::CudaDriver* d, Launches launches) {
  CUevent start, stop;
  d->cuEventCreate(&start, 0);
  d->cuEventCreate(&stop, 0);
  d->cuEventRecord(start, nullptr);
  launches();
  d->cuEventRecord(stop, nullptr);
  d->cuEventSynchronize(stop);
  float ms = 0;
  d->cuEventElapsedTime_v2(&ms, start, stop);
  d->cuEventDestroy_v2(start);
  d->cuEventDestroy_v2(stop);
  return ms;
}

// Microseconds per run of `reps` runs of `run` (a callable returning
// whether its launches were accepted) back to back between two events,
// after one untimed run; -1 when a run failed.
template <class Run>
double backToBackUs(Run run, int reps) {
  if (!run()) return -1;
  bool ok = true;
  const double ms = eventTimedMs((*Gpu::get())->d, [&] {
    for (int r = 0; r < reps && ok; ++r) ok = run();
  });
  return ok ? 1e3 * ms / reps : -1;
}

// Runs `run` back to back for about `seconds`: the card then sits at its
// power limit, as through a long prefill (an H200 holds 700 W there).
template <class Run>
void heatFor(Run run, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 10; ++i) run();
    (*Gpu::get())->d->cuCtxSynchronize();
  }
}

// Device memory filled with 0xFF bytes (NaN in bf16, f16 and f32) so an
// element the kernel should have written but did not shows up as NaN.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    const cuda::CudaDriver* d = (*Gpu::get())->d;
    if (d->cuMemAlloc_v2(&ptr_, bytes ? bytes : 1) != CUDA_SUCCESS) ptr_ = 0;
    if (ptr_) d->cuMemsetD8_v2(ptr_, 0xFF, bytes ? bytes : 1);
  }
  template <class T>
  static DeviceBuffer from(const std::vector<T>& host) {
    DeviceBuffer b(host.size() * sizeof(T));
    if (!host.empty()) (*Gpu::get())->d->cuMemcpyHtoD_v2(b.ptr_, host.data(), b.bytes_);
    return b;
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) (*Gpu::get())->d->cuMemFree_v2(ptr_);
  }
  template <class T>
  std::vector<T> download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    if (!host.empty()) (*Gpu::get())->d->cuMemcpyDtoH_v2(host.data(), ptr_, bytes_);
    return host;
  }
  void* get() const { return reinterpret_cast<void*>(ptr_); }
  template <class T>
  T* as() const { return reinterpret_cast<T*>(ptr_); }
  bool ok() const { return ptr_ != 0; }

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

struct Kernel {
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  cuda_codegen::Instance instance;
  cuda::ResourceUsage resources;
};

inline Result<Kernel> compile(const std::string& kind, const nlohmann::json& params) {
  auto gpu = Gpu::get();
  if (!gpu) return gpu.error();
  const std::string name = cuda_codegen::instanceName(kind, params);
  auto inst = cuda_codegen::instanceSource(kind, params, name);
  if (!inst) return inst.error();
  cuda::CompileOptions options;
  options.include_dirs = cuda::defaultKernelIncludeDirs();
  if (!inst->arch.empty()) options.arch = inst->arch;  // the wgmma kernels: sm_90a
  auto compiled = cuda::compileKernel(name, inst->source, options);
  if (!compiled) return compiled.error();
  Kernel k;
  k.instance = inst.take();
  k.resources = compiled->resources;
  const cuda::CudaDriver* d = (*gpu)->d;
  KILN_RETURN_IF_ERROR(d->check(d->cuModuleLoadData(&k.module, compiled->cubin.data()), "cuModuleLoadData"));
  KILN_RETURN_IF_ERROR(d->check(d->cuModuleGetFunction(&k.function, k.module, name.c_str()), "cuModuleGetFunction"));
  return k;
}

// An int constant of a generated instance's Config ("kBlockM = 64;"), or -1.
inline int configConstant(const Kernel& k, const std::string& name) {
  return cuda_codegen::configConstant(k.instance.source, name, -1);
}

// The dynamic shared memory an instance's Config names (kSmemBytes; 0 when
// it names none), opted into for its function: a launch past 48 KiB needs it.
inline Result<int> optIntoDynamicSmem(const Kernel& k) {
  const int smem = std::max(0, configConstant(k, "kSmemBytes"));
  if (smem > 0) {
    const cuda::CudaDriver* d = (*Gpu::get())->d;
    KILN_RETURN_IF_ERROR(d->check(d->cuFuncSetAttribute(k.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem),
                                  "cuFuncSetAttribute (dynamic shared memory)"));
  }
  return smem;
}

// Launches with the instance's block size and waits.
template <class Params>
Status launch(const Kernel& k, unsigned gx, unsigned gy, unsigned gz, Params params) {
  const cuda::CudaDriver* d = (*Gpu::get())->d;
  void* args[] = {&params};
  auto smem = optIntoDynamicSmem(k);  // the instance's kSmemBytes, if it names one
  if (!smem) return smem.error();
  KILN_RETURN_IF_ERROR(d->check(d->cuLaunchKernel(k.function, gx, gy, gz, k.instance.launch.block_threads, 1, 1,
                                                  unsigned(*smem), nullptr, args, nullptr),
                                "cuLaunchKernel"));
  return d->check(d->cuCtxSynchronize(), "cuCtxSynchronize (kernel execution)");
}

// The SMs of device 0 (a persistent kernel's grid), or 0 when unknown.
inline int multiprocessors() {
  auto gpu = Gpu::get();
  if (!gpu) return 0;
  int sms = 0;
  (*gpu)->d->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, (*gpu)->device);
  return sms;
}

// Under compute-sanitizer (gpu-check sets KILN_UNDER_SANITIZER), every
// shared-memory access of the streamed gemm (gemv_stream.cuh: all of W
// passes through shared memory) is instrumented, and its Llama-shaped cases
// would take minutes: those are left to the plain runs, saying so; the
// small streamed cases still run under the tools.
inline bool skipUnderSanitizer(bool streamed, int64_t weight_elems, const std::string& what) {
  if (!streamed || weight_elems <= (int64_t(1) << 20) || !std::getenv("KILN_UNDER_SANITIZER")) return false;
  std::printf("  %s: not run under compute-sanitizer (%lld weights through shared memory)\n", what.c_str(),
              static_cast<long long>(weight_elems));
  return true;
}

// The grid of a skinny gemm whose blocks each take one tile (`tiles` of
// them): gemv.cuh's. gemv_stream.cuh's persistent blocks (kTiles) get 13,
// so each walks many tiles, unevenly, and its ring wraps many times.
inline unsigned skinnyGrid(const Kernel& k, unsigned tiles) {
  return configConstant(k, "kTiles") > 0 ? std::min(tiles, 13u) : tiles;
}

// The skinny GEMM in float64 over x [rows, k] and W [n, k] (bias [n] or
// null): y = x · Wᵀ + bias, [rows, n]; with SwiGLU (W = [gate; up]),
// silu(x · gate_jᵀ + bias_j) · (x · up_jᵀ + bias_{n/2 + j}), [rows, n / 2].
inline std::vector<double> skinnyGemmReference(const std::vector<float>& x, const std::vector<float>& w,
                                               const std::vector<float>* bias, int rows, int n, int k,
                                               bool silu_mul) {
  auto dot = [&](int m, int j) {
    double s = bias ? (*bias)[size_t(j)] : 0.0;
    for (int i = 0; i < k; ++i) s += double(x[size_t(m) * k + i]) * w[size_t(j) * k + i];
    return s;
  };
  const int out = silu_mul ? n / 2 : n;
  std::vector<double> ref(size_t(rows) * out);
  for (int m = 0; m < rows; ++m)
    for (int j = 0; j < out; ++j) {
      if (!silu_mul) {
        ref[size_t(m) * out + j] = dot(m, j);
        continue;
      }
      const double gate = dot(m, j), up = dot(m, out + j);
      ref[size_t(m) * out + j] = gate / (1.0 + std::exp(-gate)) * up;
    }
  return ref;
}

// residual_rms_norm of one row in float64, as a gemm with the norm folded
// in computes it: the f32 sum of the stream and the branch, and the row
// normalized, times the weight, rounded to bf16 (the norm's output type).
struct FoldedNormReference {
  std::vector<double> sum;
  std::vector<float> normed;
};
inline FoldedNormReference foldedNormReference(const std::vector<float>& stream, const std::vector<float>& residual,
                                               const std::vector<float>& weight, double epsilon) {
  const size_t k = stream.size();
  FoldedNormReference r{std::vector<double>(k), std::vector<float>(k)};
  double squares = 0;
  for (size_t i = 0; i < k; ++i) {
    r.sum[i] = double(stream[i] + residual[i]);  // the f32 sum
    squares += r.sum[i] * r.sum[i];
  }
  const double inv = 1.0 / std::sqrt(squares / double(k) + epsilon);
  for (size_t i = 0; i < k; ++i) r.normed[i] = roundBf16(float(r.sum[i] * inv * weight[i]));
  return r;
}

// Counts elements outside atol + rtol·|ref| (NaN always counts) and prints the first few.
inline void expectClose(const std::vector<float>& got, const std::vector<double>& ref, double atol,
                        double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - ref[i]);
    const bool fail = !(err <= atol + rtol * std::fabs(ref[i]));
    if (fail) {
      if (bad < 5) ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", expected " << ref[i];
      ++bad;
    }
    if (std::isfinite(err)) worst = std::max(worst, err);
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements differ";
  std::printf("  %-48s %8zu elements, max abs error %.3g\n", what.c_str(), got.size(), worst);
}

inline std::vector<float> bf16ToFloat(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = fromBf16(v[i]);
  return out;
}

// Random bf16 values (as bits) in [-scale, scale], and their float values.
inline std::vector<uint16_t> randomBf16(std::mt19937& rng, size_t n, float scale, std::vector<float>* values = nullptr) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<uint16_t> out(n);
  if (values) values->resize(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = toBf16(dist(rng));
    if (values) (*values)[i] = fromBf16(out[i]);
  }
  return out;
}

}  // namespace kiln::gpu_test
