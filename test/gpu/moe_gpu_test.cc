// The routed SwiGLU experts on the GPU in bf16, both paths the compiler
// selects between (moe.cuh's gathered GEMVs, moe_grouped_mma.cuh's
// tensor-core grouped GEMMs; each followed by moe_combine), against the CPU
// backend's f32 experts (runtime/cpu/kernels/moe.h, checked there against
// float64) on the same bf16 values. Routings are chosen here: ragged counts,
// one expert taking most slots, the last expert none; 1 to 700 tokens, so
// the grouped GEMMs run with 16-slot and 128-slot tiles and experts span
// several tiles. Device buffers start as NaN (gpu_harness.h); rows past the
// batch must stay NaN. Within 2e-2 (atol + rtol) of the CPU's f32.
// ctest label `gpu`: needs an NVIDIA GPU and driver (scripts/gpu-check.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "codegen/kernels/kernel_params.cuh"
#include "codegen/kernels/moe_grouped_mma.cuh"  // moe_mma::grid (host-visible part)
#include "runtime/cpu/kernels/moe.h"
#include "test/gpu/gpu_harness.h"

namespace kiln::gpu_test {
namespace {

using nlohmann::json;
namespace kk = kiln::kernels;

struct Shape {
  int hidden, ffn, experts, top_k;
};

// Token t's k-th expert: expert 0 first for four tokens in five, the rest
// consecutive experts from a ragged start among 1 .. E - 2 (distinct within
// a token; the last expert gets nothing).
int expertOf(const Shape& s, int t, int k) {
  const int spread = s.experts - 2;
  if (k == 0 && t % 5 != 4) return 0;
  return 1 + (t * 3 + (t % 3) * 5 + k) % spread;
}

void checkShape(const Shape& s, const std::vector<int>& batches) {
  auto gpu = Gpu::get();
  if (!gpu.ok()) GTEST_SKIP() << "this test needs an NVIDIA GPU: " << gpu.error().message;
  const int H = s.hidden, F = s.ffn, E = s.experts, K = s.top_k;
  const json params{{"hidden", H}, {"ffn", F}, {"experts", E}, {"top_k", K}, {"weight_type", "bf16"}};
  std::vector<Kernel> kernels;
  for (const char* kind : {"moe_gate_up", "moe_down", "moe_combine", "moe_gate_up_mma", "moe_down_mma"}) {
    auto k = compile(kind, params);
    ASSERT_TRUE(k.ok()) << kind << ": " << k.error().message;
    kernels.push_back(k.take());
  }
  const Kernel &gate_up = kernels[0], &down = kernels[1], &combine = kernels[2], &gate_up_mma = kernels[3],
               &down_mma = kernels[4];
  std::mt19937 rng(uint32_t(H * 31 + E));
  std::vector<float> gv, uv, dv;
  const auto gate = randomBf16(rng, size_t(E) * F * H, 1.0f / std::sqrt(float(H)), &gv);
  const auto up = randomBf16(rng, size_t(E) * F * H, 1.0f / std::sqrt(float(H)), &uv);
  const auto down_w = randomBf16(rng, size_t(E) * H * F, 1.0f / std::sqrt(float(F)), &dv);
  auto d_gate = DeviceBuffer::from(gate), d_up = DeviceBuffer::from(up), d_down = DeviceBuffer::from(down_w);
  cpu::ExpertWeights cw{gv.data(), uv.data(), dv.data(), WeightType::F32, E, F, H};

  for (int rows : batches) {
    SCOPED_TRACE("rows " + std::to_string(rows) + ", hidden " + std::to_string(H) + ", " + std::to_string(E) +
                 " experts, top " + std::to_string(K));
    constexpr int kPoisonRows = 2;
    std::vector<float> xv;
    const auto x = randomBf16(rng, size_t(rows) * H, 1.0f, &xv);
    std::vector<int> ids(size_t(rows) * K);
    std::vector<float> wv(ids.size());
    std::vector<uint16_t> w(ids.size());
    std::uniform_real_distribution<float> share(0.1f, 1.0f);
    for (int t = 0; t < rows; ++t)
      for (int k = 0; k < K; ++k) {
        ids[size_t(t) * K + k] = expertOf(s, t, k);
        w[size_t(t) * K + k] = toBf16(share(rng));
        wv[size_t(t) * K + k] = fromBf16(w[size_t(t) * K + k]);
      }
    for (int t = 0; t < rows; ++t)  // a token's experts are distinct
      for (int a = 0; a < K; ++a)
        for (int b = a + 1; b < K; ++b) ASSERT_NE(ids[size_t(t) * K + a], ids[size_t(t) * K + b]) << "token " << t;
    std::vector<float> ref(size_t(rows) * H);
    std::vector<float> scratch(size_t(cpu::moeScratchFloats(rows, K, H, F)));
    ASSERT_TRUE(cpu::moeExperts(xv.data(), rows, wv.data(), ids.data(), K, cw, scratch, ref.data()).ok());

    auto d_x = DeviceBuffer::from(x), d_w = DeviceBuffer::from(w), d_ids = DeviceBuffer::from(ids);
    for (bool grouped : {false, true}) {
      SCOPED_TRACE(grouped ? "grouped tensor-core GEMMs" : "gathered GEMVs");
      DeviceBuffer d_act(size_t(rows) * K * F * 4), d_partial(size_t(rows) * K * H * 4);
      DeviceBuffer d_out(size_t(rows + kPoisonRows) * H * 2);
      kk::MoeExpertsParams p{d_x.get(), d_w.get(), d_ids.as<int>(), d_gate.get(), d_up.get(), d_down.get(),
                             d_act.as<float>(), d_partial.as<float>(), d_out.get(), rows};
      if (grouped) {
        const kk::moe_mma::Grid g = kk::moe_mma::grid(true, rows, K, E, H, F), d = kk::moe_mma::grid(false, rows, K, E, H, F);
        KILN_GPU_OK(launch(gate_up_mma, g.x, g.y, 1, p));
        KILN_GPU_OK(launch(down_mma, d.x, d.y, 1, p));
      } else {
        const unsigned groups = unsigned(kk::moeExpertGroups(E, rows, K)), passes = unsigned(kk::moeRowGroups(rows));
        constexpr int kColumns = kk::kMoeColumnsPerBlock;
        KILN_GPU_OK(launch(gate_up, unsigned((F + kColumns - 1) / kColumns), groups, passes, p));
        KILN_GPU_OK(launch(down, unsigned((H + kColumns - 1) / kColumns), groups, passes, p));
      }
      KILN_GPU_OK(launch(combine, unsigned(rows), 1, 1, p));
      const std::vector<float> out = bf16ToFloat(d_out.download<uint16_t>());
      double diff = 0, norm = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        ASSERT_FALSE(std::isnan(out[i])) << "output " << i << " not written";
        ASSERT_NEAR(out[i], ref[i], 2e-2 * (1.0 + std::fabs(ref[i]))) << "token " << i / H << " column " << i % H;
        diff += (out[i] - ref[i]) * double(out[i] - ref[i]);
        norm += double(ref[i]) * ref[i];
      }
      for (size_t i = ref.size(); i < out.size(); ++i) ASSERT_TRUE(std::isnan(out[i])) << "wrote past the batch";
      const double rel = std::sqrt(diff / norm);
      std::printf("moe %s rows %d (hidden %d, ffn %d, %d experts, top %d): rel L2 %.2e vs the CPU's f32\n",
                  grouped ? "grouped" : "gemv", rows, H, F, E, K, rel);
      EXPECT_LT(rel, 1e-2);
    }
  }
}

// Mixtral's routing (8 experts, top 2) at a smaller width: 16-slot tiles
// up to 64 rows, 128-slot tiles past that (expert 0 then takes most of 700
// rows: six tiles).
TEST(MoeGpu, MixtralRoutingBothPaths) { checkShape({1024, 1536, 8, 2}, {1, 5, 8, 32, 64, 65, 100, 700}); }

// Qwen3-MoE's routing (many experts, top 8): most experts get one or two slots.
TEST(MoeGpu, ManyExpertsTopEightBothPaths) { checkShape({512, 256, 32, 8}, {1, 8, 33, 300}); }

}  // namespace
}  // namespace kiln::gpu_test
