// kiln_swiglu_bench: an MLP's gate/up projection with its SwiGLU at a
// prefill's rows, as the executor runs it (cuBLASLt's first heuristic
// choice writing [rows, 2F] in bf16, then kiln's silu_mul) and as one
// gemm_swiglu_wgmma launch. Each is timed `reps` runs back to back after a
// second of heat (a 2048-token prefill of Llama-3-8B holds the H200 at its
// 700 W limit), alternating, over three rounds; the best round of each is
// printed with its TFLOP/s by the projection's 2 rows 2F K FLOPs, and the
// ratio of the two. The fused output is also checked against the unfused
// one (relative L2 error). GPU machine only:
//
//   kiln_swiglu_bench [--rows R] [--hidden K] [--ffn F] [--reps N]
//
// Defaults: Llama-3-8B's MLP (K 4096, F 14336) at 2048 rows, 20 reps.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/cuda/cublaslt.h"
#include "test/gpu/gemm_algos.h"
#include "test/gpu/gemm_swiglu_params.h"
#include "test/gpu/gpu_harness.h"

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;

int run(int rows, int hidden, int ffn, int reps) {
  auto gpu = Gpu::get();
  if (!gpu) {
    std::fprintf(stderr, "kiln_swiglu_bench: %s\n", gpu.error().message.c_str());
    return 1;
  }
  auto lt_or = cuda::loadCublasLt();
  if (!lt_or) {
    std::fprintf(stderr, "kiln_swiglu_bench: %s\n", lt_or.error().message.c_str());
    return 1;
  }
  const cuda::CublasLt* lt = *lt_or;
  const cuda::CudaDriver* d = (*gpu)->d;
  const int sms = multiprocessors();
  std::printf("GPU: %s (%d SMs), cuBLASLt %zu; rows %d, hidden %d, ffn %d; %d runs back to back after 1 s of heat, "
              "best of 3 rounds\n",
              (*gpu)->name.c_str(), sms, lt->version, rows, hidden, ffn, reps);

  std::mt19937 rng(5);
  const auto xb = randomBf16(rng, size_t(rows) * hidden, 1.0f);
  const auto wb = randomBf16(rng, size_t(2) * ffn * hidden, 0.02f);
  auto d_x = DeviceBuffer::from(xb), d_w = DeviceBuffer::from(wb);
  DeviceBuffer d_gate_up(size_t(rows) * 2 * ffn * 2), d_unfused(size_t(rows) * ffn * 2), d_fused(size_t(rows) * ffn * 2);
  const size_t workspace_bytes = size_t(32) << 20;  // the executor's kCublasWorkspace
  DeviceBuffer workspace(workspace_bytes);

  // The executor's way: cuBLASLt's first choice, then silu_mul.
  cublasLtHandle_t handle = nullptr;
  lt->cublasLtCreate(&handle);
  GemmProblem problem = makeGemmProblem(*lt, handle, 2 * ffn, hidden, rows, workspace_bytes);
  const auto candidates = heuristicCandidates(*lt, problem, 1);
  if (candidates.empty()) {
    std::fprintf(stderr, "kiln_swiglu_bench: cuBLASLt has no algorithm for the gate/up GEMM\n");
    return 1;
  }
  auto silu_mul = compile("silu_mul", {{"ffn", ffn}, {"merged_gate_up", true}});
  auto fused = compile("gemm_swiglu", {{"hidden", hidden}, {"ffn", ffn}});
  if (!silu_mul || !fused) {
    std::fprintf(stderr, "kiln_swiglu_bench: %s\n", (!silu_mul ? silu_mul.error() : fused.error()).message.c_str());
    return 1;
  }
  kk::ElementwiseParams silu_params{d_gate_up.get(), nullptr, d_unfused.get(), rows};
  const unsigned silu_blocks = unsigned(std::min<long long>((1LL * rows * ffn / 8 + 255) / 256, 65535));
  auto unfused_run = [&] {
    const float alpha = 1.0f, beta = 0.0f;
    if (lt->cublasLtMatmul(handle, problem.desc, &alpha, d_w.get(), problem.a, d_x.get(), problem.b, &beta,
                           d_gate_up.get(), problem.c, d_gate_up.get(), problem.d, &candidates[0].algo,
                           workspace.get(), workspace_bytes, nullptr) != CUBLAS_STATUS_SUCCESS)
      return false;
    void* args[] = {&silu_params};
    return d->cuLaunchKernel(silu_mul->function, silu_blocks, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr) ==
           CUDA_SUCCESS;
  };

  // kiln's fused kernel.
  auto params = gemmSwiGluParams(d_x.get(), d_w.get(), d_fused.get(), rows, hidden, ffn);
  auto smem = optIntoDynamicSmem(*fused);
  if (!params || !smem) {
    std::fprintf(stderr, "kiln_swiglu_bench: %s\n", (!params ? params.error() : smem.error()).message.c_str());
    return 1;
  }
  const unsigned fused_blocks = unsigned(kk::gemm_swiglu::grid_blocks(rows, ffn, sms));
  auto fused_run = [&] {
    void* args[] = {&*params};
    return d->cuLaunchKernel(fused->function, fused_blocks, 1, 1, kk::gemm_swiglu::kThreads, 1, 1, unsigned(*smem),
                             nullptr, args, nullptr) == CUDA_SUCCESS;
  };

  // Both once, then the fused output against the unfused one.
  if (!unfused_run() || !fused_run() || !d->check(d->cuCtxSynchronize(), "the first runs").ok()) {
    std::fprintf(stderr, "kiln_swiglu_bench: a first run failed\n");
    return 1;
  }
  const std::vector<float> a = bf16ToFloat(d_unfused.download<uint16_t>()), b = bf16ToFloat(d_fused.download<uint16_t>());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(a[i]) * a[i];
  }
  std::printf("fused vs cuBLASLt + silu_mul: relative L2 error %.3g (the unfused path rounds gate/up to bf16 first)\n",
              std::sqrt(diff / std::max(norm, 1e-30)));

  double best_unfused = 1e30, best_fused = 1e30;
  for (int round = 0; round < 3; ++round) {
    heatFor(unfused_run, 1.0);
    const double u = backToBackUs(unfused_run, reps);
    heatFor(fused_run, 1.0);
    const double f = backToBackUs(fused_run, reps);
    if (u < 0 || f < 0) {
      std::fprintf(stderr, "kiln_swiglu_bench: a timed run failed\n");
      return 1;
    }
    std::fprintf(stderr, "round %d: cuBLASLt + silu_mul %.1f us, gemm_swiglu_wgmma %.1f us\n", round + 1, u, f);
    best_unfused = std::min(best_unfused, u);
    best_fused = std::min(best_fused, f);
  }
  const double flops = 2.0 * rows * 2.0 * ffn * hidden;
  auto tflops = [&](double us) { return flops / (us * 1e-6) / 1e12; };
  std::printf("cuBLASLt gate/up + silu_mul: %.1f us (%.1f TFLOP/s)\n", best_unfused, tflops(best_unfused));
  std::printf("gemm_swiglu_wgmma:           %.1f us (%.1f TFLOP/s) on %u blocks\n", best_fused, tflops(best_fused),
              fused_blocks);
  std::printf("gemm_swiglu_wgmma / (cuBLASLt + silu_mul): %.3f\n", best_fused / best_unfused);
  destroyGemmProblem(*lt, problem);
  lt->cublasLtDestroy(handle);
  return 0;
}

}  // namespace
}  // namespace kiln::gpu_test

int main(int argc, char** argv) {
  int rows = 2048, hidden = 4096, ffn = 14336, reps = 20;
  for (int i = 1; i < argc; ++i) {
    auto value = [&](int& v) {
      if (i + 1 >= argc) return false;
      v = std::atoi(argv[++i]);
      return v > 0;
    };
    const bool ok = (std::strcmp(argv[i], "--rows") == 0 && value(rows)) ||
                    (std::strcmp(argv[i], "--hidden") == 0 && value(hidden)) ||
                    (std::strcmp(argv[i], "--ffn") == 0 && value(ffn)) ||
                    (std::strcmp(argv[i], "--reps") == 0 && value(reps));
    if (!ok) {
      std::fprintf(stderr, "usage: kiln_swiglu_bench [--rows R] [--hidden K] [--ffn F] [--reps N]\n");
      return 2;
    }
  }
  return kiln::gpu_test::run(rows, hidden, ffn, reps);
}
