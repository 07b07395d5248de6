// Times every tiling of the block-quantized GEMM (gemm_quant.cuh: the split
// of K over a block's warps, the tiles a warp keeps in flight) on
// Llama-3-8B's decode shapes in q4_0 (kiln's int4) and q8_0 (int8), at 1 and
// 16 rows of x, each checked against float64 over the blocks' values and
// timed with W out of L2 (copies over 256 MiB, cycled launch by launch, as
// in a forward pass), rates by weight bytes. It prints the tiling the
// instance generator picks beside the fastest. GPU machine only:
//
//   kiln_quant_sweep [--reps N]
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <optional>
#include <string>

#include "codegen/kernels/kernel_params.cuh"
#include "runtime/numerics/packed_blocks.h"
#include "runtime/numerics/quant.h"
#include "test/gpu/gpu_harness.h"

namespace kiln::gpu_test {
namespace {

struct Tiling {
  int split = 0, unroll = 0;
};

int run(int reps) {
  auto got_gpu = Gpu::get();
  if (!got_gpu) {
    std::fprintf(stderr, "kiln_quant_sweep: %s\n", got_gpu.error().message.c_str());
    return 1;
  }
  Gpu* gpu = *got_gpu;
  const cuda::CudaDriver* d = gpu->d;
  const std::vector<std::pair<int, int>> shapes = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  std::mt19937 rng(7);
  std::printf("GPU: %s, %d reps per timing\n", gpu->name.c_str(), reps);
  std::printf("| type | n | k | rows | generated split/unroll | TB/s | fastest split/unroll | TB/s | wrong |\n"
              "|---|---|---|---|---|---|---|---|---|\n");
  int failures = 0;
  for (WeightType type : {WeightType::Q4_0, WeightType::Q8_0}) {
    const std::string type_name(weightTypeName(type));
    for (auto [n, k] : shapes) {
      std::normal_distribution<float> normal(0.0f, 0.05f);
      std::vector<float> w_f32(size_t(n) * k), w(size_t(n) * k);
      for (float& v : w_f32) v = normal(rng);
      std::vector<uint8_t> blocks(size_t(n * rowBytes(type, k))), tiles;
      if (!quantizeRow(type, w_f32.data(), blocks.data(), int64_t(n) * k).ok() ||
          !dequantizeRow(type, blocks.data(), w.data(), int64_t(n) * k).ok() ||
          !packBlocks(type, blocks.data(), n, k, 0, tiles).ok())
        return 1;
      const size_t w_bytes = tiles.size();
      const int copies = int(std::max<size_t>(1, ((size_t(256) << 20) + w_bytes - 1) / w_bytes));
      std::vector<DeviceBuffer> d_ws;
      for (int c = 0; c < copies; ++c) d_ws.push_back(DeviceBuffer::from(tiles));
      std::vector<float> x;
      const std::vector<uint16_t> xb = randomBf16(rng, size_t(16) * k, 1.0f, &x);
      auto d_x = DeviceBuffer::from(xb);
      for (int rows : {1, 16}) {
        const int max_rows = rows <= 8 ? 8 : 16;
        const nlohmann::json base{{"n", n}, {"k", k}, {"weight_type", type_name}, {"bias", false},
                                  {"gemv_max_rows", max_rows}};
        std::vector<Tiling> tilings;
        for (int split : {1, 2, 4, 8})
          for (int unroll : {1, 2, 4, 8}) tilings.push_back({split, unroll});
        std::vector<std::future<Result<Kernel>>> pending;
        for (const Tiling& t : tilings)
          pending.push_back(std::async(std::launch::async, [=] {
            gpu->d->cuCtxSetCurrent(gpu->context);
            nlohmann::json params = base;
            params["quant_split"] = t.split;
            params["quant_unroll"] = t.unroll;
            return compile("gemm", params);
          }));
        auto generated = compile("gemm", base);
        if (!generated) {
          std::fprintf(stderr, "%s n %d k %d: %s\n", type_name.c_str(), n, k, generated.error().message.c_str());
          return 1;
        }
        // Checked on 64 output rows spread over n, every x row; timed cycling the copies.
        auto time = [&](const Kernel& kern) -> std::optional<double> {
          const int rpb = configConstant(kern, "kRowsPerBlock");
          if (rpb <= 0) return std::nullopt;
          DeviceBuffer d_y(size_t(rows) * n * 2);
          kernels::GemvParams p{d_x.get(), d_ws[0].get(), nullptr, d_y.get(), rows};
          const unsigned grid = unsigned((n + rpb - 1) / rpb), gz = unsigned((rows + max_rows - 1) / max_rows);
          if (!launch(kern, grid, 1, gz, p).ok()) return std::nullopt;
          const std::vector<uint16_t> y = d_y.download<uint16_t>();
          for (int m = 0; m < rows; ++m)
            for (int i = 0; i < 64; ++i) {
              const int row = int((long long)i * 7919 % n);
              double ref = 0;
              for (int e = 0; e < k; ++e) ref += double(w[size_t(row) * k + e]) * x[size_t(m) * k + e];
              if (!(std::fabs(fromBf16(y[size_t(m) * n + row]) - ref) <= 1e-2 + 1e-2 * std::fabs(ref))) return std::nullopt;
            }
          std::vector<kernels::GemvParams> per_copy(d_ws.size(), p);
          for (size_t c = 0; c < d_ws.size(); ++c) per_copy[c].w = d_ws[c].get();
          const double ms = eventTimedMs(d, [&] {
            for (int i = 0; i < reps; ++i) {
              void* args[] = {&per_copy[size_t(i) % per_copy.size()]};
              d->cuLaunchKernel(kern.function, grid, 1, gz, kern.instance.launch.block_threads, 1, 1, 0, nullptr,
                                args, nullptr);
            }
          });
          return double(w_bytes) / (ms / 1e3 / reps) / 1e12;
        };
        const std::optional<double> base_rate = time(*generated);
        Tiling best;
        double best_rate = 0;
        int wrong = 0;
        for (size_t i = 0; i < tilings.size(); ++i) {
          auto kern = pending[i].get();
          if (!kern) continue;  // a tiling the generator refuses
          const std::optional<double> rate = time(*kern);
          if (!rate) {
            ++wrong;
            continue;
          }
          if (*rate > best_rate) best_rate = *rate, best = tilings[i];
        }
        std::printf("| %s | %d | %d | %d | %d/%d | %.2f%s | %d/%d | %.2f | %d |\n", type_name.c_str(), n, k, rows,
                    configConstant(*generated, "kSplitK"), configConstant(*generated, "kUnroll"),
                    base_rate.value_or(0.0), base_rate ? "" : " (WRONG)", best.split, best.unroll, best_rate, wrong);
        failures += wrong + (base_rate ? 0 : 1);
      }
    }
  }
  return failures == 0 ? 0 : 2;
}

}  // namespace
}  // namespace kiln::gpu_test

int main(int argc, char** argv) {
  int reps = 50;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
  return kiln::gpu_test::run(reps);
}
