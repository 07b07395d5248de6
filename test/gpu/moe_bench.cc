// kiln_moe_bench: one mixture-of-experts layer as kiln's kernels run it
// (moe_router, gate/up, down, moe_combine; bf16), at Mixtral-8x7B's shape by
// default, for each batch in --rows (decode batches and a prefill chunk
// alike: one token a row). The experts run on the path the compiler picks
// for that batch (--paths auto: moe.cuh's gathered GEMVs below
// moe_mma::min_rows, moe_grouped_mma.cuh's tensor-core grouped GEMMs from
// there), or on each path named (--paths gemv,grouped). Each chain is timed
// `reps` runs back to back after a second of heat, best of three rounds:
// the whole layer (router + experts + combine), then the expert GEMMs alone
// (gate/up and down) with their TFLOP/s (2 · rows · top_k · 3 · H · F) and
// the bytes they must read (the gate, up and down matrices of every expert
// some row chose, once) as GB/s and as a fraction of --hbm (GB/s; default
// the H200's nominal 4800, or pass gpu-check's read probe). The first
// token's output is checked against a float64 host computation of its
// experts (relative L2 error). GPU only:
//
//   kiln_moe_bench [--hidden H] [--ffn F] [--experts E] [--top-k K] [--layers L]
//                  [--rows 1,32,2048] [--paths auto|gemv|grouped,...] [--reps N] [--hbm GBPS]
//
// --layers only scales the per-token figure: L such layers' expert FFNs
// alone bound a decode at rows / (L · t) tokens a second.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/kernels/kernel_params.cuh"
#include "codegen/kernels/moe_grouped_mma.cuh"  // moe_mma::grid, min_rows (host-visible part)
#include "test/gpu/gpu_harness.h"

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;

int ceilDiv(int a, int b) { return (a + b - 1) / b; }

// Random bf16 of magnitude about `scale` (sign, exponent near log2(scale),
// random mantissa): fast enough for gigabytes of expert weights.
std::vector<uint16_t> fastRandomBf16(size_t n, float scale, uint64_t seed) {
  std::vector<uint16_t> out(n);
  const uint16_t base = toBf16(scale) & 0x7f80;  // exponent of scale
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    out[i] = uint16_t((s & 0x8000) | (base - ((s >> 16) & 1) * 0x80) | ((s >> 20) & 0x7f));
  }
  return out;
}

struct Shape {
  int hidden = 4096, ffn = 14336, experts = 8, top_k = 2, layers = 32, reps = 20;
  double hbm = 4800;
  std::vector<int> rows = {1, 32, 2048};
  std::vector<std::string> paths = {"auto"};
};

int run(const Shape& s) {
  auto gpu = Gpu::get();
  if (!gpu) {
    std::fprintf(stderr, "kiln_moe_bench: %s\n", gpu.error().message.c_str());
    return 1;
  }
  const cuda::CudaDriver* d = (*gpu)->d;
  const int H = s.hidden, F = s.ffn, E = s.experts, K = s.top_k;
  std::printf("GPU: %s; hidden %d, ffn %d, %d experts, top %d, bf16; HBM %.0f GB/s\n", (*gpu)->name.c_str(), H, F, E,
              K, s.hbm);
  const nlohmann::json router_params{{"hidden", H}, {"experts", E}, {"top_k", K}, {"normalize", true},
                                     {"weight_type", "bf16"}};
  const nlohmann::json expert_params{{"hidden", H}, {"ffn", F}, {"experts", E}, {"top_k", K}, {"weight_type", "bf16"}};
  auto router = compile("moe_router", router_params);
  auto gate_up = compile("moe_gate_up", expert_params);
  auto down = compile("moe_down", expert_params);
  auto combine = compile("moe_combine", expert_params);
  auto gate_up_mma = compile("moe_gate_up_mma", expert_params);
  auto down_mma = compile("moe_down_mma", expert_params);
  for (auto* k : {&router, &gate_up, &down, &combine, &gate_up_mma, &down_mma})
    if (!*k) {
      std::fprintf(stderr, "kiln_moe_bench: %s\n", k->error().message.c_str());
      return 1;
    }
  auto smem = optIntoDynamicSmem(*gate_up_mma);
  if (smem) smem = optIntoDynamicSmem(*down_mma);
  if (!smem) {
    std::fprintf(stderr, "kiln_moe_bench: %s\n", smem.error().message.c_str());
    return 1;
  }
  const unsigned mma_smem = unsigned(*smem);
  const size_t matrix = size_t(F) * H;
  const auto wg = fastRandomBf16(size_t(E) * matrix, 1.0f / std::sqrt(float(H)), 1);
  const auto wu = fastRandomBf16(size_t(E) * matrix, 1.0f / std::sqrt(float(H)), 2);
  const auto wd = fastRandomBf16(size_t(E) * matrix, 1.0f / std::sqrt(float(F)), 3);
  std::mt19937 rng(7);
  const auto wr = randomBf16(rng, size_t(E) * H, 1.0f / std::sqrt(float(H)));
  auto d_wg = DeviceBuffer::from(wg), d_wu = DeviceBuffer::from(wu), d_wd = DeviceBuffer::from(wd);
  auto d_wr = DeviceBuffer::from(wr);
  if (!d_wg.ok() || !d_wu.ok() || !d_wd.ok()) {
    std::fprintf(stderr, "kiln_moe_bench: cannot allocate %.1f GB of experts\n", 3.0 * E * matrix * 2 / 1e9);
    return 1;
  }
  int status = 0;
  for (int rows : s.rows) {
    std::vector<float> x_values;
    const auto x = randomBf16(rng, size_t(rows) * H, 1.0f, &x_values);
    auto d_x = DeviceBuffer::from(x);
    DeviceBuffer d_weights(size_t(rows) * K * 2), d_ids(size_t(rows) * K * 4), d_out(size_t(rows) * H * 2);
    DeviceBuffer d_act(size_t(rows) * K * F * 4), d_partial(size_t(rows) * K * H * 4);
    kk::MoeRouteParams rp{d_x.get(), d_wr.get(), d_weights.get(), d_ids.as<int>(), rows};
    kk::MoeExpertsParams ep{d_x.get(), d_weights.get(), d_ids.as<int>(), d_wg.get(), d_wu.get(), d_wd.get(),
                            d_act.as<float>(), d_partial.as<float>(), d_out.get(), rows};
    const unsigned groups = unsigned(kk::moeExpertGroups(E, rows, K));
    const unsigned passes = unsigned(kk::moeRowGroups(rows));
    const kk::moe_mma::Grid gu = kk::moe_mma::grid(true, rows, K, E, H, F), dn = kk::moe_mma::grid(false, rows, K, E, H, F);
    auto launch = [&](const Kernel& k, unsigned gx, unsigned gy, unsigned gz, unsigned threads, unsigned smem_bytes,
                      void* params) {
      void* args[] = {params};
      return d->cuLaunchKernel(k.function, gx, gy, gz, threads, 1, 1, smem_bytes, nullptr, args, nullptr) ==
             CUDA_SUCCESS;
    };
    std::vector<std::string> paths;
    for (const std::string& path : s.paths)
      paths.push_back(path != "auto" ? path : rows >= kk::moe_mma::min_rows(E, K) ? "grouped" : "gemv");
    for (const std::string& path : paths) {
      const bool grouped = path == "grouped";
      auto experts = [&] {
        if (grouped)
          return launch(*gate_up_mma, gu.x, gu.y, 1, kk::moe_mma::kThreads, mma_smem, &ep) &&
                 launch(*down_mma, dn.x, dn.y, 1, kk::moe_mma::kThreads, mma_smem, &ep);
        return launch(*gate_up, unsigned(ceilDiv(F, kk::kMoeColumnsPerBlock)), groups, passes, 256, 0, &ep) &&
               launch(*down, unsigned(ceilDiv(H, kk::kMoeColumnsPerBlock)), groups, passes, 256, 0, &ep);
      };
      auto chain = [&] {
        return launch(*router, unsigned(rows), 1, 1, 128, 0, &rp) && experts() &&
               launch(*combine, unsigned(rows), 1, 1, 128, 0, &ep);
      };
      if (!chain() || !d->check(d->cuCtxSynchronize(), "the first run").ok()) {
        std::fprintf(stderr, "kiln_moe_bench: the first run at %d rows (%s) failed\n", rows, path.c_str());
        return 1;
      }
      const auto ids = d_ids.download<int>();
      const auto weights = bf16ToFloat(d_weights.download<uint16_t>());
      const auto out = bf16ToFloat(d_out.download<uint16_t>());
      std::set<int> chosen(ids.begin(), ids.end());
      // Token 0 on the host, float64, through the experts the GPU chose.
      double diff = 0, norm = 0;
      std::vector<double> ref(static_cast<size_t>(H), 0.0), act(static_cast<size_t>(F));
      for (int k = 0; k < K; ++k) {
        const int e = ids[size_t(k)];
        if (e < 0 || e >= E) {
          std::fprintf(stderr, "kiln_moe_bench: token 0 routed to expert %d\n", e);
          return 1;
        }
        for (int f = 0; f < F; ++f) {
          double g = 0, u = 0;
          const size_t row = size_t(e) * matrix + size_t(f) * H;
          for (int i = 0; i < H; ++i) {
            g += double(fromBf16(wg[row + i])) * x_values[size_t(i)];
            u += double(fromBf16(wu[row + i])) * x_values[size_t(i)];
          }
          act[size_t(f)] = g / (1.0 + std::exp(-g)) * u;
        }
        for (int j = 0; j < H; ++j) {
          double acc = 0;
          const size_t row = size_t(e) * matrix + size_t(j) * F;
          for (int f = 0; f < F; ++f) acc += double(fromBf16(wd[row + f])) * act[size_t(f)];
          ref[size_t(j)] += weights[size_t(k)] * acc;
        }
      }
      for (int j = 0; j < H; ++j) {
        diff += (out[size_t(j)] - ref[size_t(j)]) * (out[size_t(j)] - ref[size_t(j)]);
        norm += ref[size_t(j)] * ref[size_t(j)];
      }
      const double rel = std::sqrt(diff / std::max(norm, 1e-30));
      auto best = [&](auto run) {
        double us = 1e30;
        for (int round = 0; round < 3; ++round) {
          heatFor(run, 1.0);
          const double t = backToBackUs(run, s.reps);
          if (t < 0) return -1.0;
          us = std::min(us, t);
        }
        return us;
      };
      const double layer_us = best(chain), experts_us = best(experts);
      if (layer_us < 0 || experts_us < 0) {
        std::fprintf(stderr, "kiln_moe_bench: a timed run failed\n");
        return 1;
      }
      const double bytes = 2.0 * double(chosen.size()) * 3 * matrix;
      const double gbps = bytes / (experts_us * 1e-6) / 1e9;
      const double tflops = 2.0 * rows * K * 3 * double(matrix) / (experts_us * 1e-6) / 1e12;
      std::printf("moe rows %d (%s): %.1f us a layer (router + gate/up + down + combine); expert GEMMs %.1f us: "
                  "%.1f TFLOP/s, %zu of %d experts = %.2f GB -> %.0f GB/s = %.2f of HBM; token 0 rel L2 %.2e; "
                  "expert FFNs of %d layers alone: %.0f tok/s\n",
                  rows, path.c_str(), layer_us, experts_us, tflops, chosen.size(), E, bytes / 1e9, gbps, gbps / s.hbm,
                  rel, s.layers, rows / (s.layers * experts_us * 1e-6));
      if (!(rel < 2e-2)) {
        std::printf("moe rows %d (%s): FAIL, token 0's output is %.2e from float64 (bound 2e-2)\n", rows, path.c_str(),
                    rel);
        status = 1;
      }
    }
  }
  return status;
}

}  // namespace
}  // namespace kiln::gpu_test

int main(int argc, char** argv) {
  kiln::gpu_test::Shape s;
  for (int i = 1; i < argc; ++i) {
    auto value = [&](int& v) {
      if (i + 1 >= argc) return false;
      v = std::atoi(argv[++i]);
      return v > 0;
    };
    bool ok = false;
    if (std::strcmp(argv[i], "--rows") == 0 && i + 1 < argc) {
      s.rows.clear();
      std::stringstream list(argv[++i]);
      for (std::string r; std::getline(list, r, ',');) s.rows.push_back(std::atoi(r.c_str()));
      ok = !s.rows.empty() && *std::min_element(s.rows.begin(), s.rows.end()) > 0;
    } else if (std::strcmp(argv[i], "--paths") == 0 && i + 1 < argc) {
      s.paths.clear();
      std::stringstream list(argv[++i]);
      ok = true;
      for (std::string path; std::getline(list, path, ',');) {
        ok = ok && (path == "auto" || path == "gemv" || path == "grouped");
        s.paths.push_back(path);
      }
      ok = ok && !s.paths.empty();
    } else if (std::strcmp(argv[i], "--hbm") == 0 && i + 1 < argc) {
      s.hbm = std::atof(argv[++i]);
      ok = s.hbm > 0;
    } else {
      ok = (std::strcmp(argv[i], "--hidden") == 0 && value(s.hidden)) ||
           (std::strcmp(argv[i], "--ffn") == 0 && value(s.ffn)) ||
           (std::strcmp(argv[i], "--experts") == 0 && value(s.experts)) ||
           (std::strcmp(argv[i], "--top-k") == 0 && value(s.top_k)) ||
           (std::strcmp(argv[i], "--layers") == 0 && value(s.layers)) ||
           (std::strcmp(argv[i], "--reps") == 0 && value(s.reps));
    }
    if (!ok) {
      std::fprintf(stderr,
                   "usage: kiln_moe_bench [--hidden H] [--ffn F] [--experts E] [--top-k K] [--layers L] "
                   "[--rows 1,32,2048] [--paths auto|gemv|grouped,...] [--reps N] [--hbm GBPS]\n");
      return 2;
    }
  }
  return kiln::gpu_test::run(s);
}
