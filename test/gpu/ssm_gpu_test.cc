// The state-space kernels (codegen/kernels/ssm.cuh) on the GPU in bf16
// against the CPU backend's f32 kernels (runtime/cpu/kernels/ssm.h, which
// kiln_ssm_cpu_test checks against float64 references from transformers'
// modeling code): Mamba's selective scan alone, then the Mamba-2 layer's
// conv, scan and gated norm over a ragged batch of a 300-row prefill (ten
// chunks) and a decode step continuing a non-zero state, then 40 more
// decode steps of both, the states carried in their pool slots between
// launches. Shapes: tiny-mamba2's layer and Mamba-2 2.7B's (80 heads of
// 64, state 128, one group). Within 2e-2 (atol + rtol) of the CPU's f32.
// ctest label `gpu`: needs an NVIDIA GPU and driver (scripts/gpu-check.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "codegen/kernels/ssm_params.cuh"
#include "runtime/cpu/kernels/ssm.h"
#include "test/gpu/gpu_harness.h"

namespace kiln::gpu_test {
namespace {

using nlohmann::json;
namespace kk = kiln::kernels;

#define COMPILE(var, kind, params)                      \
  auto var##_r = compile(kind, params);                 \
  ASSERT_TRUE(var##_r.ok()) << var##_r.error().message; \
  Kernel var = var##_r.take()

struct Shape {
  int heads, head_dim, groups, state;
};

void checkLayer(const Shape& s, std::mt19937& rng) {
  auto gpu = Gpu::get();
  ASSERT_TRUE(gpu.ok()) << "this test needs an NVIDIA GPU: " << gpu.error().message;
  const int I = s.heads * s.head_dim, GN = s.groups * s.state, C = I + 2 * GN, F = I + C + s.heads, K = 4;
  constexpr int kPrefill = 300, kSteps = 40, kSlots = 3;
  const int slot_of[2] = {2, 0};
  COMPILE(conv, "ssm_conv1d", (json{{"channels", C}, {"width", K}, {"silu", true}, {"weight_type", "f32"}}));
  COMPILE(scan, "ssd_scan", (json{{"heads", s.heads}, {"head_dim", s.head_dim}, {"groups", s.groups},
                                  {"state", s.state}, {"param_type", "f32"}}));
  COMPILE(norm, "ssm_gated_norm", (json{{"features", I}, {"group_size", I}, {"weight_type", "f32"}}));

  std::uniform_real_distribution<float> u(-1, 1);
  auto fill = [&](size_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = u(rng) * scale;
    return v;
  };
  const std::vector<float> conv_w = fill(size_t(C) * K, 0.5f), conv_b = fill(C, 0.1f), norm_w = fill(I, 1.0f);
  std::vector<float> dt_bias = fill(s.heads, 1.0f), a_log = fill(s.heads, 1.0f), d = fill(s.heads, 1.0f);
  for (float& v : dt_bias) v -= 2.0f;  // softplus(dt + bias) mostly in 0.05 .. 0.5
  const size_t conv_slot = size_t(K - 1) * C, ssm_slot = size_t(I) * s.state;
  // The decode sequence starts from a non-zero state (as after an earlier prefill).
  std::vector<float> conv_pool(conv_slot * kSlots, 0.0f), ssm_pool(ssm_slot * kSlots, 0.0f);
  const std::vector<float> init_conv = fill(conv_slot, 1.0f), init_ssm = fill(ssm_slot, 1.0f);
  std::vector<uint16_t> conv_pool_bf(conv_pool.size());
  for (size_t i = 0; i < conv_slot; ++i) {
    conv_pool_bf[size_t(slot_of[1]) * conv_slot + i] = toBf16(init_conv[i]);
    conv_pool[size_t(slot_of[1]) * conv_slot + i] = fromBf16(toBf16(init_conv[i]));
  }
  for (size_t i = 0; i < ssm_slot; ++i) ssm_pool[size_t(slot_of[1]) * ssm_slot + i] = init_ssm[i];
  for (size_t i = 0; i < conv_pool_bf.size(); ++i)
    if (i / conv_slot != size_t(slot_of[1])) conv_pool_bf[i] = 0;  // zero slots start zeroed (bf16 +0)

  auto d_conv_w = DeviceBuffer::from(conv_w), d_conv_b = DeviceBuffer::from(conv_b), d_norm_w = DeviceBuffer::from(norm_w);
  std::vector<float> head_params = dt_bias;
  head_params.insert(head_params.end(), a_log.begin(), a_log.end());
  head_params.insert(head_params.end(), d.begin(), d.end());
  auto d_heads = DeviceBuffer::from(head_params);
  auto d_conv_pool = DeviceBuffer::from(conv_pool_bf), d_ssm_pool = DeviceBuffer::from(ssm_pool);
  auto d_slots = DeviceBuffer::from(std::vector<int>{slot_of[0], slot_of[1]});

  for (int launch_i = 0; launch_i <= kSteps; ++launch_i) {
    const int rows0 = launch_i == 0 ? kPrefill : 1, rows = rows0 + 1;
    std::vector<float> proj;
    std::vector<uint16_t> proj_bf = randomBf16(rng, size_t(rows) * F, 1.0f, &proj);
    auto d_proj = DeviceBuffer::from(proj_bf);
    auto d_qs = DeviceBuffer::from(std::vector<int>{0, rows0, rows});
    DeviceBuffer d_conv_out(size_t(rows) * C * 2), d_y(size_t(rows) * I * 2), d_out(size_t(rows) * I * 2);
    // Byte offsets into a device buffer (bf16 columns of the projection and conv outputs).
    auto at = [](const DeviceBuffer& b, size_t bytes) { return static_cast<const void*>(static_cast<const char*>(b.get()) + bytes); };
    kk::SsmConvParams cp{at(d_proj, size_t(I) * 2), d_conv_w.get(), d_conv_b.get(), d_conv_out.get(),
                         d_conv_pool.get(), d_qs.as<int>(), d_slots.as<int>(), F, 2};
    KILN_GPU_OK(launch(conv, unsigned((C + 127) / 128), 2, 1, cp));
    kk::SsdScanParams sp{d_conv_out.get(), at(d_conv_out, size_t(I) * 2), at(d_conv_out, size_t(I + GN) * 2),
                         at(d_proj, size_t(I + C) * 2), d_heads.get(), at(d_heads, size_t(s.heads) * 4),
                         at(d_heads, size_t(2 * s.heads) * 4), d_y.get(), d_ssm_pool.as<float>(), d_qs.as<int>(),
                         d_slots.as<int>(), C, C, F, 2, 0.0f, INFINITY};
    KILN_GPU_OK(launch(scan, unsigned(s.heads), 2, 1, sp));
    kk::SsmGatedNormParams np{d_y.get(), d_proj.get(), d_norm_w.get(), d_out.get(), F, rows, 1e-5f};
    KILN_GPU_OK(launch(norm, unsigned(rows), 1, 1, np));

    // The CPU's f32 kernels on the same (bf16-valued) inputs, sequence by sequence.
    std::vector<double> want(size_t(rows) * I);
    for (int seq = 0; seq < 2; ++seq) {
      const int begin = seq == 0 ? 0 : rows0, n = seq == 0 ? rows0 : 1, slot = slot_of[seq];
      std::vector<float> co_f(size_t(n) * C), y(size_t(n) * I), out(size_t(n) * I);
      const float* at = proj.data() + size_t(begin) * F;
      cpu::causalConv1d(at + I, n, C, F, conv_w.data(), K, conv_b.data(), true, conv_pool.data() + slot * conv_slot,
                        co_f.data(), C);
      cpu::SsdScanArgs a;
      a.x = co_f.data();
      a.b = co_f.data() + I;
      a.c = co_f.data() + I + GN;
      a.dt = at + I + C;
      a.dt_bias = dt_bias.data();
      a.a_log = a_log.data();
      a.d = d.data();
      a.rows = n;
      a.heads = s.heads;
      a.head_dim = s.head_dim;
      a.groups = s.groups;
      a.state_size = s.state;
      a.x_stride = a.bc_stride = C;
      a.dt_stride = F;
      a.chunk_size = 256;
      a.dt_min = 0.0f;
      a.dt_max = INFINITY;
      std::vector<float> scratch(size_t(cpu::ssdScratchFloats(a)));
      cpu::ssdScan(a, ssm_pool.data() + slot * ssm_slot, y.data(), scratch.data());
      cpu::gatedRmsNorm(y.data(), I, at, F, norm_w.data(), n, I, I, 1e-5f, out.data());
      for (size_t i = 0; i < out.size(); ++i) want[size_t(begin) * I + i] = out[i];
    }
    const std::string what = fmt::format("heads {} state {}: launch {} ({} rows)", s.heads, s.state, launch_i, rows);
    expectClose(bf16ToFloat(d_out.download<uint16_t>()), want, 2e-2, 2e-2, what);
    if (::testing::Test::HasFailure()) return;
  }
  // The carried f32 states after 341 tokens.
  std::vector<double> states(ssm_pool.begin(), ssm_pool.end());
  expectClose(d_ssm_pool.download<float>(), states, 2e-2, 2e-2, "SSM states in the pool");
}

// Mamba's selective scan at mamba-2.8b's shape (5120 channels, state 16, dt
// rank 160): bf16 x, dt, B, C against the CPU's f32 selectiveScan, a
// 300-row prefill and a decode row in one batch, then 20 decode steps.
TEST(SsmGpu, SelectiveScanBf16WithinTwoPercentOfCpuF32) {
  auto gpu = Gpu::get();
  ASSERT_TRUE(gpu.ok()) << "this test needs an NVIDIA GPU: " << gpu.error().message;
  constexpr int C = 5120, N = 16, R = 160, W = R + 2 * N, kPrefill = 300, kSlots = 2;
  std::mt19937 rng(293);
  COMPILE(scan, "selective_scan", (json{{"channels", C}, {"state", N}, {"param_type", "f32"}}));
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a_log(size_t(C) * N), d(C);
  for (float& v : a_log) v = std::log(1.0f + 8.0f * (u(rng) + 1.0f) / 2.0f);
  for (float& v : d) v = u(rng);
  std::vector<float> pool(size_t(kSlots) * C * N, 0.0f);
  auto d_alog = DeviceBuffer::from(a_log), d_d = DeviceBuffer::from(d), d_pool = DeviceBuffer::from(pool);
  auto d_slots = DeviceBuffer::from(std::vector<int>{1, 0});
  for (int step = 0; step <= 20; ++step) {
    const int rows0 = step == 0 ? kPrefill : 1, rows = rows0 + 1;
    std::vector<float> x, dt, dbc;
    auto x_bf = randomBf16(rng, size_t(rows) * C, 1.0f, &x);
    auto dt_bf = randomBf16(rng, size_t(rows) * C, 2.0f, &dt);
    for (size_t i = 0; i < dt.size(); ++i) dt[i] = fromBf16(dt_bf[i] = toBf16(dt[i] - 2.5f));  // softplus ~0.01-0.4
    auto dbc_bf = randomBf16(rng, size_t(rows) * W, 1.0f, &dbc);
    auto d_x = DeviceBuffer::from(x_bf), d_dt = DeviceBuffer::from(dt_bf), d_dbc = DeviceBuffer::from(dbc_bf);
    auto d_qs = DeviceBuffer::from(std::vector<int>{0, rows0, rows});
    DeviceBuffer d_y(size_t(rows) * C * 2);
    auto at = [](const DeviceBuffer& b, size_t bytes) { return static_cast<const void*>(static_cast<const char*>(b.get()) + bytes); };
    kk::SelectiveScanParams p{d_x.get(), d_dt.get(), at(d_dbc, size_t(R) * 2), at(d_dbc, size_t(R + N) * 2),
                              d_alog.get(), d_d.get(), d_y.get(), d_pool.as<float>(), d_qs.as<int>(), d_slots.as<int>(),
                              C, C, W, 2};
    KILN_GPU_OK(launch(scan, unsigned(C * N / 128), 2, 1, p));
    std::vector<double> want(size_t(rows) * C);
    for (int seq = 0; seq < 2; ++seq) {
      const int begin = seq == 0 ? 0 : rows0, n = seq == 0 ? rows0 : 1, slot = seq == 0 ? 1 : 0;
      cpu::SelectiveScanArgs a{x.data() + size_t(begin) * C, dt.data() + size_t(begin) * C,
                               dbc.data() + size_t(begin) * W + R, dbc.data() + size_t(begin) * W + R + N,
                               a_log.data(), d.data(), n, C, N, C, C, W};
      std::vector<float> y(size_t(n) * C);
      cpu::selectiveScan(a, pool.data() + size_t(slot) * C * N, y.data());
      for (size_t i = 0; i < y.size(); ++i) want[size_t(begin) * C + i] = y[i];
    }
    expectClose(bf16ToFloat(d_y.download<uint16_t>()), want, 2e-2, 2e-2, fmt::format("selective_scan step {}", step));
    if (::testing::Test::HasFailure()) return;
  }
  expectClose(d_pool.download<float>(), std::vector<double>(pool.begin(), pool.end()), 2e-2, 2e-2,
              "selective_scan states in the pool");
}

TEST(SsmGpu, TinyMamba2LayerBf16WithinTwoPercentOfCpuF32) {
  std::mt19937 rng(291);
  checkLayer({8, 16, 2, 16}, rng);
}

TEST(SsmGpu, Mamba2_2_7BLayerBf16WithinTwoPercentOfCpuF32) {
  std::mt19937 rng(292);
  checkLayer({80, 64, 1, 128}, rng);
}

}  // namespace
}  // namespace kiln::gpu_test
