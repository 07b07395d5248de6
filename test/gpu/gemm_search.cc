// Searches cuBLASLt's algorithm configurations around its heuristic's
// candidates for the prefill GEMMs of Llama-3-8B (2048 rows, bf16 in and
// out, f32 accumulation, the executor's layouts), to see whether the
// heuristic's list leaves speed behind. Each configuration is timed in the
// state a prefill runs in: the card already at its power limit from a second
// of the same GEMM, then `reps` runs back to back between two events.
// The executor keeps the heuristic's first: at the power limit one GEMM's
// gain here did not survive the whole forward (docs/performance.md).
// GPU machine only:
//
//   kiln_gemm_search [--reps N] [--rows R] [--only N]
//
// --only N searches only the shape whose output width is N (28672: gate/up).
// Each shape ends with a line a script can read back:
//   best_config N,K:id,tile,stages,cluster,inner,splitk,reduction,swizzle,custom
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/cuda/cublaslt.h"
#include "test/gpu/gemm_algos.h"
#include "test/gpu/gpu_harness.h"

namespace kiln::gpu_test {
namespace {

struct Gemm {
  const cuda::CublasLt* lt;
  GemmProblem problem;
  void *w, *x, *y, *workspace;
};

bool runOnce(const Gemm& g, const cublasLtMatmulAlgo_t& algo) {
  const float alpha = 1.0f, beta = 0.0f;
  const GemmProblem& p = g.problem;
  return g.lt->cublasLtMatmul(p.handle, p.desc, &alpha, g.w, p.a, g.x, p.b, &beta, g.y, p.c, g.y, p.d, &algo,
                              g.workspace, p.workspace_bytes, nullptr) == CUBLAS_STATUS_SUCCESS;
}

double timeUs(const Gemm& g, const cublasLtMatmulAlgo_t& algo, int reps) {
  return backToBackUs([&] { return runOnce(g, algo); }, reps);
}
void heat(const Gemm& g, const cublasLtMatmulAlgo_t& algo, double seconds) {
  heatFor([&] { return runOnce(g, algo); }, seconds);
}

int run(int reps, int rows, int only) {
  auto gpu = Gpu::get();
  if (!gpu) {
    std::fprintf(stderr, "kiln_gemm_search: %s\n", gpu.error().message.c_str());
    return 1;
  }
  auto lt_or = cuda::loadCublasLt();
  if (!lt_or) {
    std::fprintf(stderr, "kiln_gemm_search: %s\n", lt_or.error().message.c_str());
    return 1;
  }
  const cuda::CublasLt* lt = *lt_or;
  cublasLtHandle_t handle = nullptr;
  lt->cublasLtCreate(&handle);
  std::printf("GPU: %s, cuBLASLt %zu, %d rows, %d back-to-back runs per timing after 1 s of heat\n",
              (*gpu)->name.c_str(), lt->version, rows, reps);
  const size_t workspace_bytes = size_t(32) << 20;  // the executor's kCublasWorkspace
  DeviceBuffer workspace(workspace_bytes);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const std::vector<std::pair<int, int>> shapes = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  for (auto [n, k] : shapes) {
    if (only > 0 && n != only) continue;
    std::vector<uint16_t> w(size_t(n) * k), x(size_t(rows) * k);
    for (auto& v : w) v = toBf16(dist(rng) * 0.05f);
    for (auto& v : x) v = toBf16(dist(rng));
    auto d_w = DeviceBuffer::from(w);
    auto d_x = DeviceBuffer::from(x);
    DeviceBuffer d_y(size_t(rows) * n * 2);
    Gemm g{lt, makeGemmProblem(*lt, handle, n, k, rows, workspace_bytes), d_w.get(), d_x.get(), d_y.get(),
           workspace.get()};
    GemmProblem& p = g.problem;
    const std::vector<cublasLtMatmulHeuristicResult_t> results = heuristicCandidates(*lt, p, 32);
    const int found = int(results.size());
    if (found == 0) {
      std::printf("n %d k %d: no heuristic result\n", n, k);
      destroyGemmProblem(*lt, p);
      continue;
    }
    const double flops = 2.0 * rows * n * k;
    heat(g, results[0].algo, 1.0);
    struct Timed {
      GemmAlgoConfig c;
      double us;
      std::string from;
    };
    std::vector<Timed> timed;
    for (int i = 0; i < found; ++i) {
      const double us = timeUs(g, results[i].algo, reps);
      timed.push_back({gemmAlgoConfig(*lt, results[i].algo), us, fmt::format("heuristic #{}", i)});
    }
    const double first = timed[0].us;
    std::vector<cublasLtMatmulAlgo_t> seeds;
    for (int i = 0; i < found; ++i) seeds.push_back(results[i].algo);
    const std::vector<cublasLtMatmulAlgo_t> neighbours = gemmAlgoNeighbours(*lt, p, seeds, /*wide=*/true);
    for (const cublasLtMatmulAlgo_t& algo : neighbours)
      timed.push_back({gemmAlgoConfig(*lt, algo), timeUs(g, algo, reps), "a neighbour"});
    // Re-time the ten fastest and the heuristic's first, alternating, after fresh heat.
    std::sort(timed.begin(), timed.end(), [](const Timed& a, const Timed& b) {
      return (a.us > 0 ? a.us : 1e30) < (b.us > 0 ? b.us : 1e30);
    });
    std::vector<Timed> finalists(timed.begin(), timed.begin() + std::min<size_t>(10, timed.size()));
    const GemmAlgoConfig heuristic_first = gemmAlgoConfig(*lt, results[0].algo);
    if (std::none_of(finalists.begin(), finalists.end(), [&](const Timed& t) { return t.c == heuristic_first; }))
      finalists.push_back({heuristic_first, first, "heuristic #0"});
    heat(g, results[0].algo, 1.0);
    for (int round = 0; round < 3; ++round)
      for (Timed& f : finalists) {
        const auto algo = gemmAlgo(*lt, p, f.c);
        if (!algo) continue;
        const double us = timeUs(g, *algo, reps);
        f.us = round == 0 ? us : std::min(f.us, us);
      }
    std::sort(finalists.begin(), finalists.end(), [](const Timed& a, const Timed& b) { return a.us < b.us; });
    double heuristic_us = 0;
    for (const Timed& f : finalists)
      if (f.c == heuristic_first) heuristic_us = f.us;
    std::printf("\nn %d k %d rows %d: %d heuristic candidates, %zu accepted neighbours\n", n, k, rows, found,
                neighbours.size());
    for (const Timed& f : finalists)
      std::printf("  %8.1f us %6.1f TFLOP/s  %s  (%s)\n", f.us, flops / (f.us * 1e-6) / 1e12, f.c.str().c_str(),
                  f.from.c_str());
    if (heuristic_us > 0)
      std::printf("  best / heuristic's first: %.3f\n", finalists[0].us / heuristic_us);
    const GemmAlgoConfig& b = finalists[0].c;
    std::printf("best_config %d,%d:%d,%u,%u,%u,%u,%d,%u,%u,%u\n", n, k, b.id, b.tile, b.stages, unsigned(b.cluster),
                unsigned(b.inner), b.splitk, b.reduction, b.swizzle, b.custom);
    destroyGemmProblem(*lt, p);
  }
  lt->cublasLtDestroy(handle);
  return 0;
}

}  // namespace
}  // namespace kiln::gpu_test

int main(int argc, char** argv) {
  int reps = 20, rows = 2048, only = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--rows") == 0 && i + 1 < argc) rows = std::max(1, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: kiln_gemm_search [--reps N] [--rows R] [--only N]\n");
      return 2;
    }
  }
  return kiln::gpu_test::run(reps, rows, only);
}
