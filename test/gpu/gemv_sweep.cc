// Times every candidate tiling of the skinny GEMM (gemv.cuh) on the decode
// shapes kiln ships for (Llama-3-8B, Llama-3.2-1B) at 1 and 8 rows, checks
// each candidate's output against a float64 reference (timed with W out of
// L2, as in a forward pass), and prints the
// fastest per shape as the table codegen/cuda/instance_source.cc's
// gemvTiling() is written from. GPU machine only:
//
//   kiln_gemv_sweep [--reps N]
//   kiln_gemv_sweep --read-probe [--reps N]   (the HBM read ceiling kiln's GEMV reaches)
#include <algorithm>
#include <cstdio>
#include <future>
#include <optional>

#include <fmt/format.h>
#include <tuple>

#include "codegen/kernels/kernel_params.cuh"
#include "test/gpu/gpu_harness.h"

namespace kiln::gpu_test {
namespace {

struct Candidate {
  int split = 0, rows_per_warp = 0, unroll = 0, max_rows = 8;
};

struct Timing {
  Candidate c;
  double tbps = 0;
  bool correct = false;
};

// The GPU, or null after saying why there is none.
Gpu* gpuOrSayWhy() {
  auto gpu = Gpu::get();
  if (gpu) return *gpu;
  std::fprintf(stderr, "kiln_gemv_sweep: %s\n", gpu.error().message.c_str());
  return nullptr;
}

int run(int reps) {
  Gpu* gpu = gpuOrSayWhy();
  if (!gpu) return 1;
  const cuda::CudaDriver* d = gpu->d;
  std::vector<Candidate> candidates;
  for (int max_rows : {8, 1})  // the single-row instances have registers for more loads in flight
    for (int split : {1, 2, 4, 8})
      for (int rpw : {1, 2, 4})
        for (int unroll : {2, 4, 8, 16})
          if (rpw * unroll <= 16 && (unroll < 16 || max_rows == 1)) candidates.push_back({split, rpw, unroll, max_rows});
  const std::vector<std::pair<int, int>> shapes = {
      {6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096},   // llama3-8b
      {3072, 2048}, {2048, 2048}, {16384, 2048}, {2048, 8192}, {128256, 2048}};  // llama3.2-1b
  std::mt19937 rng(7);
  std::printf("GPU: %s, %d reps per timing\n", gpu->name.c_str(), reps);
  std::printf("| n | k | rows | default TB/s | best TB/s | best split/rows_per_warp/unroll | wrong |\n"
              "|---|---|---|---|---|---|---|\n");
  std::vector<std::string> table, one_row_table;
  int failures = 0;
  for (auto [n, k] : shapes) {
    // Compile every candidate in parallel (NVRTC is thread-safe).
    std::vector<std::future<Result<Kernel>>> pending;
    for (const Candidate& c : candidates)
      pending.push_back(std::async(std::launch::async, [=] {
        gpu->d->cuCtxSetCurrent(gpu->context);  // the module loads into this thread's context
        return compile("gemm", {{"n", n}, {"k", k}, {"weight_type", "bf16"}, {"bias", false},
                                {"gemv_split", c.split}, {"gemv_rows_per_warp", c.rows_per_warp},
                                {"gemv_unroll", c.unroll}, {"gemv_max_rows", c.max_rows}});
      }));
    std::vector<std::optional<Kernel>> kernels;
    for (auto& f : pending) {
      auto kern = f.get();
      if (kern) {
        kernels.emplace_back(kern.take());
      } else {
        std::fprintf(stderr, "n %d k %d: %s\n", n, k, kern.error().message.c_str());
        kernels.emplace_back(std::nullopt);
        ++failures;
      }
    }
    auto fallback = compile("gemm", {{"n", n}, {"k", k}, {"weight_type", "bf16"}, {"bias", false}});
    if (!fallback) {
      std::fprintf(stderr, "default gemv n %d k %d: %s\n", n, k, fallback.error().message.c_str());
      return 1;
    }
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<uint16_t> w(size_t(n) * k), x(size_t(8) * k);
    for (auto& v : w) v = toBf16(dist(rng) * 0.05f);
    for (auto& v : x) v = toBf16(dist(rng));
    // Timed over copies of W that together exceed L2 several times, cycled
    // launch by launch: in a forward pass every weight comes from HBM, and a
    // 30-50 MB matrix repeated alone would stay in the 50 MB L2 (the first
    // sweep ranked qkv and o_proj tilings that way).
    const size_t w_bytes = w.size() * 2;
    const int copies = int(std::max<size_t>(1, ((size_t(256) << 20) + w_bytes - 1) / w_bytes));
    std::vector<DeviceBuffer> d_ws;
    for (int c = 0; c < copies; ++c) d_ws.push_back(DeviceBuffer::from(w));
    auto& d_w = d_ws[0];
    auto d_x = DeviceBuffer::from(x);
    for (int rows : {1, 8}) {
      // Checked: 64 output rows spread over n, every x row, against float64.
      auto time = [&](const Kernel& kern) -> Timing {
        Timing t;
        const int rpb = configConstant(kern, "kRowsPerBlock");
        if (rpb <= 0) return t;  // no tiling in its Config: reported as wrong
        DeviceBuffer d_y(size_t(rows) * n * 2);
        kernels::GemvParams p{d_x.get(), d_w.get(), nullptr, d_y.get(), rows};
        const unsigned grid = unsigned((n + rpb - 1) / rpb);
        if (!launch(kern, grid, 1, 1, p).ok()) return t;
        auto y = d_y.download<uint16_t>();
        t.correct = true;
        for (int m = 0; m < rows && t.correct; ++m)
          for (int i = 0; i < 64; ++i) {
            const int row = int((long long)i * 7919 % n);
            double ref = 0;
            for (int e = 0; e < k; ++e)
              ref += double(fromBf16(w[size_t(row) * k + e])) * fromBf16(x[size_t(m) * k + e]);
            const double got = fromBf16(y[size_t(m) * n + row]);
            if (!(std::fabs(got - ref) <= 1e-2 + 1e-2 * std::fabs(ref))) {
              t.correct = false;
              break;
            }
          }
        std::vector<kernels::GemvParams> per_copy(d_ws.size(), p);
        for (size_t c = 0; c < d_ws.size(); ++c) per_copy[c].w = d_ws[c].get();
        const double ms = eventTimedMs(d, [&] {
          for (int i = 0; i < reps; ++i) {
            void* args[] = {&per_copy[size_t(i) % per_copy.size()]};
            d->cuLaunchKernel(kern.function, grid, 1, 1, kern.instance.launch.block_threads, 1, 1, 0, nullptr,
                              args, nullptr);
          }
        });
        t.tbps = double(n) * k * 2 / (ms / 1e3 / reps) / 1e12;
        return t;
      };
      const Timing base = time(*fallback);
      // The fastest 8-row tiling, and at one row also the fastest single-row
      // one (a 1-row instance computes only the first row of a bigger batch).
      Timing best, best_one_row;
      int wrong = 0;
      for (size_t i = 0; i < candidates.size(); ++i) {
        if (!kernels[i] || (candidates[i].max_rows == 1 && rows != 1)) continue;
        Timing t = time(*kernels[i]);
        t.c = candidates[i];
        if (!t.correct) {
          ++wrong;
          continue;
        }
        Timing& slot = t.c.max_rows == 1 ? best_one_row : best;
        if (t.tbps > slot.tbps) slot = t;
      }
      std::printf("| %d | %d | %d | %.2f%s | %.2f | %d/%d/%d | %d |\n", n, k, rows, base.tbps,
                  base.correct ? "" : " (WRONG)", best.tbps, best.c.split, best.c.rows_per_warp, best.c.unroll,
                  wrong);
      if (rows == 1) {
        std::printf("| %d | %d | 1, single-row instance | | %.2f | %d/%d/%d | |\n", n, k, best_one_row.tbps,
                    best_one_row.c.split, best_one_row.c.rows_per_warp, best_one_row.c.unroll);
        table.push_back(fmt::format("{{{}, {}, {}, {}, {}}},  // {:.2f} TB/s at 1 row", n, k, best.c.split,
                                    best.c.rows_per_warp, best.c.unroll, best.tbps));
        one_row_table.push_back(fmt::format("{{{}, {}, {}, {}, {}}},  // {:.2f} TB/s", n, k, best_one_row.c.split,
                                            best_one_row.c.rows_per_warp, best_one_row.c.unroll, best_one_row.tbps));
      }
      failures += wrong + (base.correct ? 0 : 1);
    }
  }
  std::printf("\nmeasured table (n, k, split, rows_per_warp, unroll):\n");
  for (const auto& line : table) std::printf("  %s\n", line.c_str());
  std::printf("\nsingle-row instances (n, k, split, rows_per_warp, unroll):\n");
  for (const auto& line : one_row_table) std::printf("  %s\n", line.c_str());
  return failures == 0 ? 0 : 2;
}

// The fastest HBM read kiln's own kernels reach: the shipped single-row
// skinny GEMM on the LM head's shape (128256 x 4096, 1 GB of bf16 weights),
// cycled over four copies (4 GB, eighty times the L2) so every byte comes
// from HBM. It reads each weight once and does one multiply-add per two
// bytes, so its bandwidth is a read ceiling as much as a reduction's is:
// docs/performance.md reports batch-1 decode against the higher of this
// and transformers' (torch's sum over 4 GiB).
int readProbe(int reps) {
  Gpu* gpu = gpuOrSayWhy();
  if (!gpu) return 1;
  const cuda::CudaDriver* d = gpu->d;
  constexpr int n = 128256, k = 4096, copies = 4;
  auto kern = compile("gemm", {{"n", n}, {"k", k}, {"weight_type", "bf16"}, {"bias", false}, {"gemv_max_rows", 1}});
  if (!kern) {
    std::fprintf(stderr, "kiln_gemv_sweep: %s\n", kern.error().message.c_str());
    return 1;
  }
  std::vector<uint16_t> w(size_t(n) * k, toBf16(0.01f)), x(size_t(k), toBf16(1.0f));
  std::vector<DeviceBuffer> d_ws;
  for (int c = 0; c < copies; ++c) d_ws.push_back(DeviceBuffer::from(w));
  auto d_x = DeviceBuffer::from(x);
  DeviceBuffer d_y(size_t(n) * 2);
  const int rpb = configConstant(*kern, "kRowsPerBlock");
  const unsigned grid = unsigned((n + rpb - 1) / rpb);
  std::vector<kernels::GemvParams> params(copies, kernels::GemvParams{d_x.get(), nullptr, nullptr, d_y.get(), 1});
  for (int c = 0; c < copies; ++c) params[size_t(c)].w = d_ws[size_t(c)].get();
  auto run_all = [&](int count) {
    for (int i = 0; i < count; ++i) {
      void* args[] = {&params[size_t(i) % copies]};
      d->cuLaunchKernel(kern->function, grid, 1, 1, kern->instance.launch.block_threads, 1, 1, 0, nullptr, args,
                        nullptr);
    }
  };
  run_all(copies);  // warm-up
  const double ms = eventTimedMs(d, [&] { run_all(reps); });
  // Every y is 4096 x 0.01 in bf16 products: the launches computed, not just ran.
  const std::vector<uint16_t> y = d_y.download<uint16_t>();
  const float y0 = fromBf16(y[0]), want = 4096 * fromBf16(toBf16(0.01f));
  if (!(std::fabs(y0 - want) <= 0.01f * want)) {
    std::fprintf(stderr, "kiln_gemv_sweep: read probe computed %g, expected %g\n", y0, want);
    return 2;
  }
  std::printf("kiln_read_probe_GBps: %.1f (single-row skinny GEMM, %d x %d bf16, %d copies, %d launches, %s)\n",
              double(n) * k * 2 / (ms / 1e3 / reps) / 1e9, n, k, copies, reps, gpu->name.c_str());
  return 0;
}

}  // namespace
}  // namespace kiln::gpu_test

int main(int argc, char** argv) {
  int reps = 50;
  bool read_probe = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (std::string(argv[i]) == "--read-probe") read_probe = true;
  }
  return read_probe ? kiln::gpu_test::readProbe(reps) : kiln::gpu_test::run(reps);
}
