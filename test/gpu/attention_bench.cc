// kiln_attention_bench: the attention kernels alone, on one GPU, in the line
// format test/gpu/sdpa_bench.py prints for torch's SDPA on the same shapes.
//
//   kiln_attention_bench [--reps N] [--json PATH] [--hbm GBPS] [--only prefill|decode]
//
// (1) flash_attention prefill, B=1, S=4096, H=32, Hkv=8, D=128, causal:
//     TFLOP/s with FLOPs = 4 S² H D / 2 (QKᵀ and PV, half the square), for
//     each tiling the instance offers (4 warps x 64 rows, the default; 8
//     warps x 128 rows; flash_attention_wgmma, Hopper's warpgroup form, 2
//     warpgroups x 128 rows), then head_dim 64 (same heads) likewise plus 4
//     warps x 128 rows; and flash_attention_wgmma at S=2048, the length of
//     `kiln bench prefill`'s forward.
// (2) the decode path, paged_attention_split + attention_combine, one token
//     at context 8192, H=32, Hkv=8, D=128, for 8/16/32/64 splits: GB/s of
//     K+V read (2 · 8192 · 8 · 128 · 2 bytes). Each rep reads the next of
//     several copies of the pools, together larger than the H200's 50 MB L2.
// (3) decode_attention as the executor runs it, merging its own splits (one
//     launch), the bandwidth-bound decode kernel, at context 8192, H=32,
//     Hkv=8, D=128, for B=1 and B=32 (one token per sequence), and at batch
//     1 also at 256 and 1024 keys (a short chat's decode), over split
//     counts and the forms and tilings the instance offers (tensor cores by
//     default, ring depths 2-4; CUDA cores and their tilings): GB/s of K+V
//     and the fraction of --hbm, the HBM read probe of the same run
//     (scripts/gpu-check.sh passes sdpa_bench.py's; default 4800 GB/s, the
//     H200's nominal HBM3e bandwidth), then the fastest split count and
//     tiling per batch. Each is timed twice: standalone (every launch
//     starts after the one before has ended) and as the executor launches
//     it, a programmatic dependent of the launch before: its blocks start,
//     and copy the keys older than the step, while that launch finishes
//     (in a decode step the launch before is the qkv projection).
// (4) the floors under (3) at batch 1 (test/gpu/decode_floors.h): its grid
//     with no token; a kernel that only reads the same K+V rows; the same
//     read followed by the split merge.
// (5) decode_attention over int8 and fp8 e4m3 pools (a scale per token and
//     kv head, kv_quant.cuh) beside bf16, batch 1 at context 8192, H=32,
//     Hkv=8, D=128, each in the form the executor runs for its type (bf16:
//     tensor cores; int8/fp8: CUDA cores, a chunk a lane, 4 keys, 2 stages)
//     over split counts: time, GB/s of what it reads (codes and scales), and
//     last the fastest of each type and its time against bf16's.
// Times: a CUDA graph of 20 consecutive reps replayed between two events,
// per rep (timeMedian); the figure is the median of --reps (default 30)
// samples after 2 warm-up replays.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "codegen/kernels/kernel_params.cuh"
#include "runtime/cuda/executor/driver_extras.h"
#include "runtime/cuda/kernel_test_cases.h"
#include "test/gpu/attention_reference.h"
#include "test/gpu/chain_timing.h"
#include "test/gpu/decode_floors.h"
#include "test/gpu/gpu_harness.h"

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;
using nlohmann::json;

// A pool of `pages` pages [page, Hkv, D] of random bf16 and an identity-free
// (shuffled) block table for one sequence of `len` keys.
struct Pools {
  DeviceBuffer k, v, table;
};
Pools makePools(std::mt19937& rng, int len, int Hkv, int D) {
  const int page = 16, pages = (len + page - 1) / page;
  std::vector<int> table(pages);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  const size_t n = size_t(pages) * page * Hkv * D;
  return {DeviceBuffer::from(randomBf16(rng, n, 1.0f)), DeviceBuffer::from(randomBf16(rng, n, 1.0f)),
          DeviceBuffer::from(table)};
}

// warps 0: flash_attention_wgmma (its one tiling: a producer and two
// consumer warpgroups, 128 rows).
Result<Record> prefill(std::mt19937& rng, int reps, int S, int H, int Hkv, int D, int warps, int block_m) {
  const bool wgmma = warps == 0;
  const char* kind = wgmma ? "flash_attention_wgmma" : "flash_attention";
  json params = cuda::testing::attentionParams(H, Hkv, D, false);
  if (!wgmma && (warps != 4 || block_m != 64)) {
    params["warps"] = warps;
    params["block_m"] = block_m;
  }
  auto k = compile(kind, params);
  if (!k) return k.error();
  if (wgmma) warps = k->instance.launch.block_threads / 32, block_m = configConstant(*k, "kBlockM");
  auto dynamic_smem = optIntoDynamicSmem(*k);
  if (!dynamic_smem) return dynamic_smem.error();
  const int smem = *dynamic_smem;
  Pools pools = makePools(rng, S, Hkv, D);
  auto q = DeviceBuffer::from(randomBf16(rng, size_t(S) * H * D, 1.0f));
  auto qs = DeviceBuffer::from(std::vector<int>{0, S});
  auto kl = DeviceBuffer::from(std::vector<int>{S});
  DeviceBuffer out(size_t(S) * H * D * 2);
  kk::PagedAttentionParams p{q.get(), pools.k.get(), pools.v.get(), pools.table.as<int>(), qs.as<int>(), kl.as<int>(),
                             nullptr, out.get(), nullptr, nullptr, S, 1, (S + 15) / 16, 0, 1, nullptr};
  const Launch launch{k->function, {unsigned(H), unsigned((S + block_m - 1) / block_m), 1},
                      unsigned(k->instance.launch.block_threads), unsigned(smem), &p};
  auto ms = timeMedian(reps, [&](int) { return std::vector<Launch>{launch}; });
  if (!ms) return ms.error();
  const double flops = 4.0 * S * double(S) * H * D / 2, tflops = flops / (*ms * 1e-3) / 1e12;
  Record r;
  r.line = fmt::format("{} prefill B=1 S={} H={} Hkv={} D={} causal warps={} block_m={}: {:.3f} ms, "
                       "{:.1f} TFLOP/s (regs {}, dynamic smem {} B)",
                       kind, S, H, Hkv, D, warps, block_m, *ms, tflops, k->resources.registers, smem);
  r.fields = {{"name", "flash_attention_prefill"}, {"kind", kind}, {"B", 1}, {"S", S}, {"H", H}, {"Hkv", Hkv}, {"D", D},
              {"warps", warps}, {"block_m", block_m}, {"ms", *ms}, {"tflops", tflops},
              {"registers", k->resources.registers}};
  return r;
}

Result<std::vector<Record>> decode(std::mt19937& rng, int reps, int ctx, int H, int Hkv, int D) {
  json params = cuda::testing::attentionParams(H, Hkv, D, false);
  auto split = compile("paged_attention_split", params);
  if (!split) return split.error();
  auto combine = compile("attention_combine", json{{"heads", H}, {"head_dim", D}});
  if (!combine) return combine.error();
  const double kv_bytes = 2.0 * ctx * Hkv * D * 2;
  const int copies = int(std::ceil(150e6 / kv_bytes));  // 3x the L2
  std::vector<Pools> pools;
  for (int c = 0; c < copies; ++c) pools.push_back(makePools(rng, ctx, Hkv, D));
  auto q = DeviceBuffer::from(randomBf16(rng, size_t(H) * D, 1.0f));
  auto qs = DeviceBuffer::from(std::vector<int>{0, 1});
  auto kl = DeviceBuffer::from(std::vector<int>{ctx});
  DeviceBuffer out(size_t(H) * D * 2);
  std::vector<Record> records;
  for (int splits : {8, 16, 32, 64}) {
    DeviceBuffer po(size_t(H) * splits * D * 4), plse(size_t(H) * splits * 4);
    std::vector<kk::PagedAttentionParams> p;
    for (const Pools& pl : pools)
      p.push_back({q.get(), pl.k.get(), pl.v.get(), pl.table.as<int>(), qs.as<int>(), kl.as<int>(), nullptr, out.get(),
                   po.as<float>(), plse.as<float>(), 1, 1, (ctx + 15) / 16, 0, splits, nullptr});
    kk::AttentionCombineParams c{po.as<float>(), plse.as<float>(), out.get(), 1, splits};
    auto ms = timeMedian(reps, [&](int i) {
      return std::vector<Launch>{
          {split->function, {1, unsigned(Hkv), unsigned(splits)}, unsigned(split->instance.launch.block_threads), 0,
           &p[size_t(i) % p.size()]},
          {combine->function, {1, unsigned(H), 1}, unsigned(combine->instance.launch.block_threads), 0, &c}};
    });
    if (!ms) return ms.error();
    const double gbps = kv_bytes / (*ms * 1e-3) / 1e9;
    Record r;
    r.line = fmt::format("paged_attention_split+combine decode B=1 ctx={} H={} Hkv={} D={} splits={}: {:.1f} us, "
                         "{:.1f} GB/s of K+V",
                         ctx, H, Hkv, D, splits, *ms * 1e3, gbps);
    r.fields = {{"name", "paged_attention_decode"}, {"B", 1}, {"ctx", ctx}, {"H", H}, {"Hkv", Hkv}, {"D", D},
                {"splits", splits}, {"us", *ms * 1e3}, {"gbps", gbps}};
    records.push_back(r);
  }
  return records;
}

// B sequences of `len` keys each in one pool of B * pages pages, pages
// shuffled across the sequences. Random-valued (bf16 in [-1, 1]) from a
// repeated 1 Mi-element block: the values do not change the timing.
struct BatchPools {
  DeviceBuffer k, v, table;
};
BatchPools makeBatchPools(std::mt19937& rng, int B, int len, int Hkv, int D) {
  const int page = 16, pages = (len + page - 1) / page;
  std::vector<int> table(size_t(B) * pages);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  const size_t n = table.size() * page * Hkv * D;
  const std::vector<uint16_t> block = randomBf16(rng, size_t(1) << 20, 1.0f);
  std::vector<uint16_t> pool(n);
  for (size_t i = 0; i < n; i += block.size())
    std::copy_n(block.begin(), std::min(block.size(), n - i), pool.begin() + i);
  auto k = DeviceBuffer::from(pool);
  std::rotate(pool.begin(), pool.begin() + std::min<size_t>(n, 12345), pool.end());
  return {std::move(k), DeviceBuffer::from(pool), DeviceBuffer::from(table)};
}

Result<std::vector<Record>> decodeAttention(std::mt19937& rng, int reps, int B, int ctx, int H, int Hkv, int D,
                                            double hbm_gbps) {
  const double kv_bytes = 2.0 * B * ctx * Hkv * D * 2;
  const int copies = int(std::ceil(150e6 / kv_bytes));  // together 3x the L2
  std::vector<BatchPools> pools;
  for (int c = 0; c < copies; ++c) pools.push_back(makeBatchPools(rng, B, ctx, Hkv, D));
  const int pages = (ctx + 15) / 16;
  std::vector<int> starts(B + 1);
  std::iota(starts.begin(), starts.end(), 0);
  auto q = DeviceBuffer::from(randomBf16(rng, size_t(B) * H * D, 1.0f));
  auto qs = DeviceBuffer::from(starts);
  auto kl = DeviceBuffer::from(std::vector<int>(B, ctx));
  DeviceBuffer out(size_t(B) * H * D * 2);
  // At batch 1, counts that leave each partition at least 64 keys.
  std::vector<int> split_counts = {1, 2, 3, 4, 8, 16};
  if (B == 1) {
    split_counts.clear();
    for (int s : {1, 2, 4, 8, 16, 32, 48, 64, 96, 128})
      if (ctx / s >= 64) split_counts.push_back(s);
  }
  std::vector<Record> records;
  // The fastest configuration, launched standalone (each launch after the
  // one before has ended) and as the executor launches it (programmatic).
  struct Best {
    double us = 0;
    std::string what;
  } best[2];
  for (const json& tl : decodeAttentionTilings()) {  // params over the defaults (the tensor-core form, 3 stages)
    const std::string tiling = tl.empty() ? std::string("default") : tl.dump();
    json params = cuda::testing::attentionParams(H, Hkv, D, false);
    params.update(tl);
    auto k = compile("decode_attention", params);
    if (!k) return k.error();
    auto dynamic_smem = optIntoDynamicSmem(*k);  // the tensor-core form's; 0 for the CUDA-core one
    if (!dynamic_smem) return dynamic_smem.error();
    const int smem = *dynamic_smem;
    for (int splits : split_counts) {
      DeviceBuffer po(size_t(B) * H * splits * D * 4), plse(size_t(B) * H * splits * 4);
      auto arrivals = DeviceBuffer::from(std::vector<unsigned>(size_t(B) * Hkv, 0u));
      std::vector<kk::PagedAttentionParams> p;
      for (const BatchPools& pl : pools)
        p.push_back({q.get(), pl.k.get(), pl.v.get(), pl.table.as<int>(), qs.as<int>(), kl.as<int>(), nullptr,
                     out.get(), po.as<float>(), plse.as<float>(), B, B, pages, 0, splits, arrivals.as<unsigned>()});
      double us[2];
      for (int programmatic = 0; programmatic < 2; ++programmatic) {
        auto ms = timeMedian(reps, [&](int i) {
          return std::vector<Launch>{{k->function, {unsigned(B), unsigned(Hkv), unsigned(splits)},
                                      unsigned(k->instance.launch.block_threads), unsigned(smem),
                                      &p[size_t(i) % p.size()], programmatic == 1}};
        });
        if (!ms) return ms.error();
        us[programmatic] = *ms * 1e3;
      }
      auto gbps = [&](double t_us) { return kv_bytes / (t_us * 1e-6) / 1e9; };
      Record r;
      r.line = fmt::format("decode_attention (merging) decode B={} ctx={} H={} Hkv={} D={} splits={} {}: "
                           "standalone {:.1f} us, {:.1f} GB/s of K+V, {:.2f} of HBM; as the executor launches "
                           "it (programmatic, chained) {:.1f} us, {:.1f} GB/s, {:.2f} of HBM (regs {}, smem {} B)",
                           B, ctx, H, Hkv, D, splits, tiling, us[0], gbps(us[0]), gbps(us[0]) / hbm_gbps, us[1],
                           gbps(us[1]), gbps(us[1]) / hbm_gbps, k->resources.registers,
                           smem > 0 ? smem : k->resources.shared_bytes);
      r.fields = {{"name", "decode_attention_decode"}, {"B", B}, {"ctx", ctx}, {"H", H}, {"Hkv", Hkv}, {"D", D},
                  {"splits", splits}, {"tiling", tiling}, {"us", us[0]}, {"gbps", gbps(us[0])},
                  {"hbm_fraction", gbps(us[0]) / hbm_gbps}, {"programmatic_us", us[1]},
                  {"programmatic_gbps", gbps(us[1])}, {"programmatic_hbm_fraction", gbps(us[1]) / hbm_gbps},
                  {"registers", k->resources.registers}};
      records.push_back(r);
      for (int m = 0; m < 2; ++m)
        if (best[m].what.empty() || us[m] < best[m].us) {
          best[m].us = us[m];
          best[m].what = fmt::format("splits={} {}: {:.1f} us, {:.1f} GB/s, {:.2f} of HBM", splits, tiling, us[m],
                                     gbps(us[m]), gbps(us[m]) / hbm_gbps);
        }
    }
  }
  Record r;
  r.line = fmt::format("decode_attention best for B={} ctx={} H={} Hkv={} D={}: standalone {}; programmatic {}", B,
                       ctx, H, Hkv, D, best[0].what, best[1].what);
  r.fields = {{"name", "decode_attention_best"}, {"B", B}, {"ctx", ctx}, {"best", best[0].what},
              {"best_programmatic", best[1].what}};
  records.push_back(r);
  return records;
}

// A pool of one sequence's `len` keys of int8/fp8 codes (random, finite)
// and their scales, pages shuffled.
struct ScaledPools {
  DeviceBuffer k, v, k_scales, v_scales, table;
};
ScaledPools makeScaledPools(std::mt19937& rng, int len, int Hkv, int D) {
  const int page = 16, pages = (len + page - 1) / page;
  std::vector<int> table(pages);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::uniform_int_distribution<int> code(0, 0x7e);  // no e4m3 NaN
  auto codes = [&] {
    std::vector<uint8_t> c(size_t(pages) * page * Hkv * D);
    for (uint8_t& b : c) b = uint8_t(code(rng) | (code(rng) & 1) << 7);
    return c;
  };
  const std::vector<float> scales(size_t(pages) * page * Hkv, 1.0f / 128);
  return {DeviceBuffer::from(codes()), DeviceBuffer::from(codes()), DeviceBuffer::from(scales),
          DeviceBuffer::from(scales), DeviceBuffer::from(table)};
}

Result<std::vector<Record>> scaledKvDecode(std::mt19937& rng, int reps, int ctx, int H, int Hkv, int D,
                                           double hbm_gbps) {
  std::vector<Record> records;
  auto q = DeviceBuffer::from(randomBf16(rng, size_t(H) * D, 1.0f));
  auto qs = DeviceBuffer::from(std::vector<int>{0, 1});
  auto kl = DeviceBuffer::from(std::vector<int>{ctx});
  DeviceBuffer out(size_t(H) * D * 2);
  const int pages = (ctx + 15) / 16;
  double bf16_us = 0;
  std::string summary;
  for (const char* kv_type : {"bf16", "int8", "fp8e4m3"}) {
    const bool scaled = std::string(kv_type) != "bf16";
    json params = cuda::testing::attentionParams(H, Hkv, D, false);
    params["kv_type"] = kv_type;
    auto k = compile("decode_attention", params);
    if (!k) return k.error();
    auto dynamic_smem = optIntoDynamicSmem(*k);
    if (!dynamic_smem) return dynamic_smem.error();
    // K and V read: bf16 values, or a byte a value and a 4-byte scale a row.
    const double kv_bytes = scaled ? 2.0 * ctx * Hkv * (D + 4) : 2.0 * ctx * Hkv * D * 2;
    const int copies = int(std::ceil(150e6 / kv_bytes));  // together 3x the L2
    std::vector<kk::PagedAttentionParams> p;
    std::vector<BatchPools> bf16_pools;
    std::vector<ScaledPools> scaled_pools;
    auto arrivals = DeviceBuffer::from(std::vector<unsigned>(size_t(Hkv), 0u));
    double best_us = 0;
    int best_splits = 0;
    for (int splits : {1, 2, 4, 8, 16, 32, 48, 64, 96, 128}) {
      if (ctx / splits < 64) continue;
      DeviceBuffer po(size_t(H) * splits * D * 4), plse(size_t(H) * splits * 4);
      p.clear();
      for (int c = 0; c < copies; ++c) {
        if (scaled) {
          if (scaled_pools.size() < size_t(copies)) scaled_pools.push_back(makeScaledPools(rng, ctx, Hkv, D));
          const ScaledPools& pl = scaled_pools[size_t(c)];
          p.push_back({q.get(), pl.k.get(), pl.v.get(), pl.table.as<int>(), qs.as<int>(), kl.as<int>(), nullptr,
                       out.get(), po.as<float>(), plse.as<float>(), 1, 1, pages, 0, splits, arrivals.as<unsigned>(),
                       pl.k_scales.as<float>(), pl.v_scales.as<float>()});
        } else {
          if (bf16_pools.size() < size_t(copies)) bf16_pools.push_back(makeBatchPools(rng, 1, ctx, Hkv, D));
          const BatchPools& pl = bf16_pools[size_t(c)];
          p.push_back({q.get(), pl.k.get(), pl.v.get(), pl.table.as<int>(), qs.as<int>(), kl.as<int>(), nullptr,
                       out.get(), po.as<float>(), plse.as<float>(), 1, 1, pages, 0, splits, arrivals.as<unsigned>()});
        }
      }
      auto ms = timeMedian(reps, [&](int i) {
        return std::vector<Launch>{{k->function, {1, unsigned(Hkv), unsigned(splits)},
                                    unsigned(k->instance.launch.block_threads), unsigned(*dynamic_smem),
                                    &p[size_t(i) % p.size()]}};
      });
      if (!ms) return ms.error();
      const double us = *ms * 1e3, gbps = kv_bytes / (us * 1e-6) / 1e9;
      Record r;
      r.line = fmt::format("kv_quant decode_attention kv_type={} B=1 ctx={} H={} Hkv={} D={} splits={}: {:.1f} us, "
                           "{:.1f} GB/s of K+V (codes and scales), {:.2f} of HBM (regs {})",
                           kv_type, ctx, H, Hkv, D, splits, us, gbps, gbps / hbm_gbps, k->resources.registers);
      r.fields = {{"name", "kv_quant_decode"}, {"kv_type", kv_type}, {"B", 1}, {"ctx", ctx}, {"H", H}, {"Hkv", Hkv},
                  {"D", D}, {"splits", splits}, {"us", us}, {"gbps", gbps}, {"hbm_fraction", gbps / hbm_gbps}};
      records.push_back(r);
      if (best_splits == 0 || us < best_us) best_us = us, best_splits = splits;
    }
    if (!scaled) bf16_us = best_us;
    summary += fmt::format("{}{} {:.1f} us (splits {}, {:.2f}x bf16's time)", summary.empty() ? "" : "; ", kv_type,
                           best_us, best_splits, best_us / bf16_us);
  }
  Record r;
  r.line = fmt::format("kv_quant decode_attention best B=1 ctx={} H={} Hkv={} D={}: {}", ctx, H, Hkv, D, summary);
  r.fields = {{"name", "kv_quant_decode_best"}, {"ctx", ctx}, {"summary", summary}};
  records.push_back(r);
  return records;
}

int run(int argc, char** argv) {
  int reps = 30;
  std::string json_path;
  double hbm_gbps = 4800;  // the H200's nominal HBM3e bandwidth
  bool hbm_given = false;
  std::string only;  // "prefill", "decode", or both
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--hbm" && i + 1 < argc) hbm_gbps = std::max(1.0, std::atof(argv[++i])), hbm_given = true;
    else if (a == "--only" && i + 1 < argc && (std::strcmp(argv[i + 1], "prefill") == 0 ||
                                               std::strcmp(argv[i + 1], "decode") == 0))
      only = argv[++i];
    else {
      std::fprintf(stderr, "usage: kiln_attention_bench [--reps N] [--json PATH] [--hbm GBPS] [--only prefill|decode]\n");
      return 2;
    }
  }
  auto gpu = Gpu::get();
  if (!gpu) {
    std::fprintf(stderr, "kiln_attention_bench: needs an NVIDIA GPU: %s\n", gpu.error().message.c_str());
    return 1;
  }
  std::printf("GPU: %s, median of %d reps of %d chained launches, HBM ceiling %.0f GB/s (%s)\n",
              (*gpu)->name.c_str(), reps, kChain, hbm_gbps, hbm_given ? "--hbm" : "nominal");
  std::mt19937 rng(7);
  std::vector<Record> records;
  int status = 0;
  auto report = [&](const Record& r) {
    std::printf("%s\n", r.line.c_str());
    std::fflush(stdout);
    records.push_back(r);
  };
  struct P { int S, H, Hkv, D, warps, block_m; };
  const std::vector<P> prefills = {P{4096, 32, 8, 128, 4, 64}, P{4096, 32, 8, 128, 8, 128},
                                   P{4096, 32, 8, 128, 0, 128}, P{4096, 32, 8, 64, 4, 64},
                                   P{4096, 32, 8, 64, 4, 128},  P{4096, 32, 8, 64, 8, 128},
                                   P{4096, 32, 8, 64, 0, 128},
                                   // the 2048-token prefill `kiln bench prefill` times: 2048 / 128 = 16
                                   // query tiles a head, where blocks of few key tiles weigh more
                                   P{2048, 32, 8, 128, 0, 128}};
  if (only != "decode") {
    for (const P& c : prefills) {
      auto r = prefill(rng, reps, c.S, c.H, c.Hkv, c.D, c.warps, c.block_m);
      if (r) {
        report(*r);
      } else {
        std::fprintf(stderr, "flash_attention prefill D=%d warps=%d block_m=%d: %s\n", c.D, c.warps, c.block_m,
                     r.error().message.c_str());
        status = 1;
      }
    }
  }
  if (only != "prefill") {
    auto dec = decode(rng, reps, 8192, 32, 8, 128);
    if (dec) {
      for (const Record& r : *dec) report(r);
    } else {
      std::fprintf(stderr, "decode: %s\n", dec.error().message.c_str());
      status = 1;
    }
    if (auto floors = decodeFloors(reps, 32, 8, 128, hbm_gbps); floors) {
      for (const Record& r : *floors) report(r);
    } else {
      std::fprintf(stderr, "decode_attention floors: %s\n", floors.error().message.c_str());
      status = 1;
    }
    for (auto [B, ctx] : {std::pair{1, 8192}, std::pair{32, 8192}, std::pair{1, 256}, std::pair{1, 1024}}) {
      auto da = decodeAttention(rng, reps, B, ctx, 32, 8, 128, hbm_gbps);
      if (da) {
        for (const Record& r : *da) report(r);
      } else {
        std::fprintf(stderr, "decode_attention B=%d: %s\n", B, da.error().message.c_str());
        status = 1;
      }
    }
    if (auto kvq = scaledKvDecode(rng, reps, 8192, 32, 8, 128, hbm_gbps); kvq) {
      for (const Record& r : *kvq) report(r);
    } else {
      std::fprintf(stderr, "int8/fp8 KV decode_attention: %s\n", kvq.error().message.c_str());
      status = 1;
    }
  }
  if (!json_path.empty()) {
    json all = json::array();
    for (const Record& r : records) all.push_back(r.fields);
    std::ofstream(json_path) << all.dump(2) << "\n";
  }
  return status;
}

}  // namespace
}  // namespace kiln::gpu_test

int main(int argc, char** argv) { return kiln::gpu_test::run(argc, argv); }
