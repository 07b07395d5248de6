// kiln_sparse24_bench: the 2:4 sparse linears beside the dense ones kiln
// runs, at Llama-3-8B's linear shapes (n x k: q/o 4096 x 4096, gate or up
// 14336 x 4096, down 4096 x 14336, merged qkv 6144 x 4096), in one run:
//
//   decode, batch 1: sparse24_gemv (bf16, q8_0 and q4_0 kept values) and
//     the dense bf16 single-row gemm kiln uses on Hopper (gemv_stream.cuh
//     where it streams the shape, else gemv.cuh): µs a launch, GB/s of
//     weight bytes read (values and metadata for the sparse ones), and the
//     dense time over the sparse one. Launches cycle over copies of W that
//     together exceed L2 several times, as a forward pass reads every
//     weight from HBM.
//   prefill, 2048 rows: sparse24_gemm (mma.sp) and sparse24_gemm_wgmma
//     (sparse wgmma) against cuBLASLt's first heuristic
//     choice for the dense bf16 GEMM (the executor's), TFLOP/s by the dense
//     2 rows n k FLOPs, best of 3 rounds after a second of heat each (the
//     H200 at its power limit, as through a long prefill), and cuBLASLt's
//     time over the sparse one.
//
// GPU machine only (scripts/gpu-bundle.sh carries it):
//
//   kiln_sparse24_bench [--rows R] [--reps N] [--sweep]
//
// --sweep also times every GEMV tiling and 2-4 GEMM stages per shape.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "codegen/kernels/kernel_params.cuh"
#include "runtime/cuda/cublaslt.h"
#include "test/gpu/gemm_algos.h"
#include "test/gpu/gpu_harness.h"
#include "test/gpu/sparse24_weights.h"

namespace kiln::gpu_test {
namespace {

using nlohmann::json;
namespace kk = kiln::kernels;

struct Shape {
  const char* name;
  int n, k;
};
constexpr Shape kShapes[] = {{"q/o 4096x4096", 4096, 4096},
                             {"gate|up 14336x4096", 14336, 4096},
                             {"down 4096x14336", 4096, 14336},
                             {"qkv 6144x4096", 6144, 4096}};

// Device copies of one host buffer, enough of them to pass 256 MiB.
std::vector<DeviceBuffer> copiesPastL2(const std::vector<uint8_t>& host) {
  const size_t copies = std::max<size_t>(1, ((size_t(256) << 20) + host.size() - 1) / host.size());
  std::vector<DeviceBuffer> out;
  for (size_t c = 0; c < copies; ++c) out.push_back(DeviceBuffer::from(host));
  return out;
}

// µs a launch of `reps` launches of `k` cycling over `params` (one a copy),
// after one round untimed; -1 when a launch failed.
template <class Params>
double cycledUs(const Kernel& k, unsigned gx, unsigned gz, unsigned smem, std::vector<Params>& params, int reps) {
  const cuda::CudaDriver* d = (*Gpu::get())->d;
  bool ok = true;
  auto round = [&] {
    for (int i = 0; i < reps && ok; ++i) {
      void* args[] = {&params[size_t(i) % params.size()]};
      ok = d->cuLaunchKernel(k.function, gx, 1, gz, k.instance.launch.block_threads, 1, 1, smem, nullptr, args,
                             nullptr) == CUDA_SUCCESS;
    }
  };
  round();
  d->cuCtxSynchronize();
  const double ms = eventTimedMs(d, round);
  return ok ? 1e3 * ms / reps : -1;
}

struct DecodeRow {
  double us = -1, gbps = 0;
};

// One sparse weight's copies past L2, timed under sparse24_gemv instances.
struct SparseDecode {
  Sparse24Weight w;
  std::vector<DeviceBuffer> copies;
  DeviceBuffer y;
};
SparseDecode sparseDecode(const std::string& values, const Shape& s, std::mt19937& rng) {
  SparseDecode out{randomSparse24Weight(values, s.n, s.k, 0.02f, rng, false), {}, DeviceBuffer(size_t(s.n) * 2)};
  out.copies = copiesPastL2(out.w.prepared);
  return out;
}

// sparse24_gemv of `values` at batch 1, with `tiling` (sparse_split,
// sparse_rows_per_warp, sparse_unroll) pinned when given.
DecodeRow sparseGemv(const std::string& values, const Shape& s, SparseDecode& weight, const DeviceBuffer& d_x,
                     int reps, const json& tiling = json::object()) {
  json params{{"n", s.n}, {"k", s.k}, {"values_type", values}, {"bias", false}, {"max_rows", 1}, {"out_type", "bf16"}};
  params.update(tiling);
  auto k = compile("sparse24_gemv", params);
  if (!k) {
    std::fprintf(stderr, "kiln_sparse24_bench: %s\n", k.error().message.c_str());
    return {};
  }
  const int rpb = configConstant(*k, "kRowsPerBlock");
  std::vector<kk::Sparse24Params> launches;
  for (const DeviceBuffer& c : weight.copies)
    launches.push_back({d_x.get(), c.get(),
                        reinterpret_cast<const unsigned*>(c.as<uint8_t>() + weight.w.metadata_offset), nullptr,
                        weight.y.get(), 1});
  DecodeRow row;
  row.us = cycledUs(*k, unsigned((s.n + rpb - 1) / rpb), 1, 0, launches, reps);
  row.gbps = double(weight.w.prepared.size()) / (row.us * 1e-6) / 1e9;
  return row;
}

DecodeRow denseGemv(const Shape& s, const DeviceBuffer& d_x, std::mt19937& rng, int reps, bool& streamed) {
  const std::vector<uint16_t> wb = randomBf16(rng, size_t(s.n) * s.k, 0.02f);
  std::vector<uint8_t> bytes(wb.size() * 2);
  std::memcpy(bytes.data(), wb.data(), bytes.size());
  streamed = cuda_codegen::streamsSingleRowGemm(s.n, s.k);
  auto k = compile("gemm", json{{"n", s.n}, {"k", s.k}, {"weight_type", "bf16"}, {"bias", false},
                                {"gemv_max_rows", 1}, {"gemv_stream", streamed}});
  if (!k) {
    std::fprintf(stderr, "kiln_sparse24_bench: %s\n", k.error().message.c_str());
    return {};
  }
  auto smem = optIntoDynamicSmem(*k);
  if (!smem) {
    std::fprintf(stderr, "kiln_sparse24_bench: %s\n", smem.error().message.c_str());
    return {};
  }
  // gemv_stream's persistent blocks walk kTiles tiles; gemv.cuh's take one each.
  const int tiles = configConstant(*k, "kTiles"), rpb = configConstant(*k, "kRowsPerBlock");
  const unsigned grid = tiles > 0 ? unsigned(std::min(tiles, multiprocessors())) : unsigned((s.n + rpb - 1) / rpb);
  std::vector<DeviceBuffer> copies = copiesPastL2(bytes);
  DeviceBuffer d_y(size_t(s.n) * 2);
  std::vector<kk::GemvParams> params;
  for (const DeviceBuffer& c : copies) params.push_back({d_x.get(), c.get(), nullptr, d_y.get(), 1});
  DecodeRow row;
  row.us = cycledUs(*k, grid, 1, unsigned(*smem), params, reps);
  row.gbps = double(bytes.size()) / (row.us * 1e-6) / 1e9;
  return row;
}

struct PrefillRow {
  double sparse_us = -1, dense_us = -1, wgmma_us = -1;
};

PrefillRow prefill(const Shape& s, int rows, std::mt19937& rng, const cuda::CublasLt& lt, cublasLtHandle_t handle,
                   int reps, int stages) {
  PrefillRow out;
  const cuda::CudaDriver* d = (*Gpu::get())->d;
  const Sparse24Weight w = randomSparse24Weight("bf16", s.n, s.k, 0.02f, rng, false);
  const auto xb = randomBf16(rng, size_t(rows) * s.k, 1.0f);
  const auto wb = randomBf16(rng, size_t(s.n) * s.k, 0.02f);
  auto d_x = DeviceBuffer::from(xb), d_w = DeviceBuffer::from(wb), d_sparse = DeviceBuffer::from(w.prepared);
  auto d_meta = DeviceBuffer::from(w.mma_metadata);
  DeviceBuffer d_y(size_t(rows) * s.n * 2);
  json params{{"n", s.n}, {"k", s.k}, {"bias", false}, {"out_type", "bf16"}};
  if (stages > 0) params["sparse_stages"] = stages;
  auto k = compile("sparse24_gemm", params), kw = compile("sparse24_gemm_wgmma", params);
  if (!k || !kw) {
    std::fprintf(stderr, "kiln_sparse24_bench: %s\n", (!k ? k.error() : kw.error()).message.c_str());
    return out;
  }
  auto smem = optIntoDynamicSmem(*k), smem_w = optIntoDynamicSmem(*kw);
  if (!smem || !smem_w) return out;
  kk::Sparse24Params p{d_x.get(), d_sparse.get(), d_meta.as<unsigned>(), nullptr, d_y.get(), rows};
  auto launcher = [&](const Kernel& kern, int smem_bytes) {
    const int block_n = configConstant(kern, "kBlockN"), block_m = configConstant(kern, "kBlockM");
    return [&kern, &p, d, smem_bytes, block_n, block_m, n = s.n, rows] {
      void* args[] = {&p};
      return d->cuLaunchKernel(kern.function, unsigned((n + block_n - 1) / block_n),
                               unsigned((rows + block_m - 1) / block_m), 1, kern.instance.launch.block_threads, 1, 1,
                               unsigned(smem_bytes), nullptr, args, nullptr) == CUDA_SUCCESS;
    };
  };
  auto sparse_run = launcher(*k, *smem);
  auto wgmma_run = launcher(*kw, *smem_w);
  const size_t workspace_bytes = size_t(32) << 20;  // the executor's kCublasWorkspace
  DeviceBuffer workspace(workspace_bytes);
  GemmProblem problem = makeGemmProblem(lt, handle, s.n, s.k, rows, workspace_bytes);
  const auto candidates = heuristicCandidates(lt, problem, 1);
  if (candidates.empty()) {
    std::fprintf(stderr, "kiln_sparse24_bench: cuBLASLt has no algorithm for %s\n", s.name);
    destroyGemmProblem(lt, problem);
    return out;
  }
  auto dense_run = [&] {
    const float alpha = 1.0f, beta = 0.0f;
    return lt.cublasLtMatmul(handle, problem.desc, &alpha, d_w.get(), problem.a, d_x.get(), problem.b, &beta,
                             d_y.get(), problem.c, d_y.get(), problem.d, &candidates[0].algo, workspace.get(),
                             workspace_bytes, nullptr) == CUBLAS_STATUS_SUCCESS;
  };
  for (int round = 0; round < 3; ++round) {
    heatFor(dense_run, 1.0);
    const double dense = backToBackUs(dense_run, reps);
    heatFor(sparse_run, 1.0);
    const double sparse = backToBackUs(sparse_run, reps);
    heatFor(wgmma_run, 1.0);
    const double sparse_wgmma = backToBackUs(wgmma_run, reps);
    if (dense < 0 || sparse < 0 || sparse_wgmma < 0) break;
    out.dense_us = out.dense_us < 0 ? dense : std::min(out.dense_us, dense);
    out.sparse_us = out.sparse_us < 0 ? sparse : std::min(out.sparse_us, sparse);
    out.wgmma_us = out.wgmma_us < 0 ? sparse_wgmma : std::min(out.wgmma_us, sparse_wgmma);
  }
  destroyGemmProblem(lt, problem);
  return out;
}

// Every sparse24_gemv tiling at batch 1, the three fastest printed beside
// the instance's own choice.
void sweepGemv(const std::string& values, const Shape& s, SparseDecode& weight, const DeviceBuffer& d_x, int reps,
               const DecodeRow& chosen) {
  const int units = s.k / (values == "bf16" ? 16 : 64);
  std::vector<std::pair<double, std::string>> timed;
  for (int split : {1, 2, 4, 8})
    for (int rows_per_warp : {1, 2, 4})
      for (int unroll : {1, 2, 4, 8}) {
        if (units < 32 * split * unroll) continue;  // lanes without a full step
        const DecodeRow r = sparseGemv(values, s, weight, d_x, reps,
                                       json{{"sparse_split", split}, {"sparse_rows_per_warp", rows_per_warp},
                                            {"sparse_unroll", unroll}});
        if (r.us > 0) timed.push_back({r.us, fmt::format("split {} rows/warp {} unroll {}", split, rows_per_warp, unroll)});
      }
  std::sort(timed.begin(), timed.end());
  std::printf("  sweep %s %s: chosen %.2f us;", values.c_str(), s.name, chosen.us);
  for (size_t i = 0; i < std::min<size_t>(3, timed.size()); ++i)
    std::printf(" %.2f us (%s)%s", timed[i].first, timed[i].second.c_str(), i + 1 < std::min<size_t>(3, timed.size()) ? "," : "");
  std::printf("\n");
}

int run(int rows, int reps, bool sweep) {
  auto gpu = Gpu::get();
  if (!gpu) {
    std::fprintf(stderr, "kiln_sparse24_bench: %s\n", gpu.error().message.c_str());
    return 1;
  }
  auto lt_or = cuda::loadCublasLt();
  if (!lt_or) {
    std::fprintf(stderr, "kiln_sparse24_bench: %s\n", lt_or.error().message.c_str());
    return 1;
  }
  const cuda::CublasLt* lt = *lt_or;
  cublasLtHandle_t handle = nullptr;
  lt->cublasLtCreate(&handle);
  std::printf("GPU: %s (%d SMs), cuBLASLt %zu\n", (*gpu)->name.c_str(), multiprocessors(), lt->version);
  std::mt19937 rng(24);

  std::printf("\nDecode, batch 1 (%d launches over copies of W past L2): us, GB/s of weight bytes, dense/sparse\n",
              reps * 10);
  std::printf("%-20s %-22s %-22s %-22s %-22s %s\n", "shape", "dense bf16", "sparse bf16", "sparse q8_0", "sparse q4_0",
              "dense/sparse (bf16 q8 q4)");
  for (const Shape& s : kShapes) {
    auto d_x = DeviceBuffer::from(randomBf16(rng, size_t(s.k), 1.0f));
    bool streamed = false;
    const DecodeRow dense = denseGemv(s, d_x, rng, reps * 10, streamed);
    DecodeRow sparse[3];
    const char* values[3] = {"bf16", "q8_0", "q4_0"};
    for (int v = 0; v < 3; ++v) {
      SparseDecode weight = sparseDecode(values[v], s, rng);
      sparse[v] = sparseGemv(values[v], s, weight, d_x, reps * 10);
      if (sweep) sweepGemv(values[v], s, weight, d_x, reps * 10, sparse[v]);
    }
    auto cell = [](const DecodeRow& r) { return fmt::format("{:7.2f} us {:6.0f} GB/s", r.us, r.gbps); };
    std::printf("%-20s %-22s %-22s %-22s %-22s %.2f %.2f %.2f%s\n", s.name, cell(dense).c_str(),
                cell(sparse[0]).c_str(), cell(sparse[1]).c_str(), cell(sparse[2]).c_str(), dense.us / sparse[0].us,
                dense.us / sparse[1].us, dense.us / sparse[2].us, streamed ? "  (dense: gemv_stream)" : "");
  }

  std::printf("\nPrefill, %d rows (best of 3 rounds of %d after 1 s of heat): TFLOP/s by 2 rows n k\n", rows, reps);
  std::printf("%-20s %-24s %-24s %-24s %s\n", "shape", "cuBLASLt dense bf16", "sparse24_gemm (mma.sp)",
              "sparse24_gemm_wgmma", "cuBLASLt/sparse (mma.sp wgmma)");
  for (const Shape& s : kShapes) {
    const PrefillRow r = prefill(s, rows, rng, *lt, handle, reps, 0);
    if (sweep)
      for (int stages : {2, 3, 4}) {
        const PrefillRow t = prefill(s, rows, rng, *lt, handle, reps, stages);
        std::printf("  sweep: %d stages: mma.sp %.1f us, wgmma %.1f us (cuBLASLt %.1f us)\n", stages, t.sparse_us,
                    t.wgmma_us, t.dense_us);
      }
    const double flops = 2.0 * rows * s.n * double(s.k);
    auto cell = [&](double us) { return fmt::format("{:8.1f} us {:6.1f} TF/s", us, flops / (us * 1e-6) / 1e12); };
    std::printf("%-20s %-24s %-24s %-24s %.2f %.2f\n", s.name, cell(r.dense_us).c_str(), cell(r.sparse_us).c_str(),
                cell(r.wgmma_us).c_str(), r.dense_us / r.sparse_us, r.dense_us / r.wgmma_us);
  }
  lt->cublasLtDestroy(handle);
  return 0;
}

}  // namespace
}  // namespace kiln::gpu_test

int main(int argc, char** argv) {
  int rows = 2048, reps = 20;
  bool sweep = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--sweep") == 0) {
      sweep = true;
      continue;
    }
    auto value = [&](int& v) {
      if (i + 1 >= argc) return false;
      v = std::atoi(argv[++i]);
      return v > 0;
    };
    const bool ok = (std::strcmp(argv[i], "--rows") == 0 && value(rows)) ||
                    (std::strcmp(argv[i], "--reps") == 0 && value(reps));
    if (!ok) {
      std::fprintf(stderr, "usage: kiln_sparse24_bench [--rows R] [--reps N] [--sweep]\n");
      return 2;
    }
  }
  return kiln::gpu_test::run(rows, reps, sweep);
}
