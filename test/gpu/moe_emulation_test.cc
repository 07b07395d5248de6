// The mixture-of-experts kernels (codegen/kernels/moe.cuh) run on the host,
// no GPU, on the emulated device of cuda_emulation.h, against a float64
// forward of the same routing and experts: moe_router (router GEMV,
// softmax, top-k, renormalized or not), then moe_gate_up, moe_down and
// moe_combine over the slots each expert gathers, on the grid the executor
// launches (kernel_params.cuh: column tiles, chosen experts, row groups).
// Batches of 1, 2, 7 and 32 rows; some experts get no slot; one expert
// takes every row (with a pass of kRowsPerPass rows and with a smaller one,
// so its weights are walked in several row groups); outputs and scratch
// start as NaN, and rows past the batch must stay NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "test/gpu/cuda_emulation.h"

#include "codegen/kernels/moe.cuh"

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;

template <int H, int F, int E, int K, bool Normalize, int kPass = kk::kMoeRowsPerPass>
struct MoeConfig {
  using X = float;
  using W = float;
  using Out = float;
  static constexpr int kHidden = H, kFfn = F, kExperts = E, kTopK = K, kRowsPerPass = kPass, kThreads = 256;
  static constexpr bool kNormalize = Normalize;
};
template <class C>
struct RouterConfig : C {
  static constexpr int kThreads = 128;
};
template <class C>
struct CombineConfig : C {
  static constexpr int kThreads = 128;
};

std::vector<float> randoms(std::mt19937& rng, size_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

template <class C>
void runCase(std::mt19937& rng, int rows, bool crowd, const std::string& what) {
  constexpr int H = C::kHidden, F = C::kFfn, E = C::kExperts, K = C::kTopK;
  std::vector<float> x = randoms(rng, size_t(rows) * H, 1.0f);
  std::vector<float> wr = randoms(rng, size_t(E) * H, 1.0f / std::sqrt(float(H)));
  if (crowd) {  // positive rows and an all-ones router row 0: expert 0 wins every token
    for (float& v : x) v = std::fabs(v);
    for (int i = 0; i < H; ++i) wr[size_t(i)] = 1.0f;
  }
  std::vector<float> gate = randoms(rng, size_t(E) * F * H, 1.0f / std::sqrt(float(H)));
  std::vector<float> up = randoms(rng, size_t(E) * F * H, 1.0f / std::sqrt(float(H)));
  std::vector<float> down = randoms(rng, size_t(E) * H * F, 1.0f / std::sqrt(float(F)));
  const float nan = std::nanf("");
  constexpr int kPoisonRows = 2;
  std::vector<float> weights(size_t(rows + kPoisonRows) * K, nan);
  std::vector<int> ids(size_t(rows + kPoisonRows) * K, -1);
  std::vector<float> act(size_t(rows) * K * F, nan), partial(size_t(rows) * K * H, nan);
  std::vector<float> out(size_t(rows + kPoisonRows) * H, nan);

  kk::MoeRouteParams route{x.data(), wr.data(), weights.data(), ids.data(), rows};
  emu::launch({unsigned(rows + kPoisonRows), 1, 1}, 128, [&route] { kk::moe_router<RouterConfig<C>>(route); });
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure;
  kk::MoeExpertsParams p{x.data(), weights.data(), ids.data(), gate.data(), up.data(), down.data(),
                         act.data(), partial.data(), out.data(), rows};
  const unsigned groups = unsigned(kk::moeExpertGroups(E, rows, K));
  const unsigned passes = unsigned((rows + C::kRowsPerPass - 1) / C::kRowsPerPass);
  constexpr unsigned kColumns = kk::kMoeColumnsPerBlock;
  emu::launch({(F + kColumns - 1) / kColumns, groups, passes}, 256, [&p] { kk::moe_gate_up<C>(p); });
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure;
  emu::launch({(H + kColumns - 1) / kColumns, groups, passes}, 256, [&p] { kk::moe_down<C>(p); });
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure;
  emu::launch({unsigned(rows + kPoisonRows), 1, 1}, 128, [&p] { kk::moe_combine<CombineConfig<C>>(p); });
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure;

  for (int t = 0; t < rows; ++t) {
    // float64: router logits, softmax, the K largest, renormalized with kNormalize.
    std::vector<double> prob(E);
    double peak = -1e300, sum = 0;
    for (int e = 0; e < E; ++e) {
      double s = 0;
      for (int i = 0; i < H; ++i) s += double(x[size_t(t) * H + i]) * wr[size_t(e) * H + i];
      prob[size_t(e)] = s;
      peak = std::max(peak, s);
    }
    for (double& v : prob) sum += v = std::exp(v - peak);
    for (double& v : prob) v /= sum;
    std::vector<int> order(E);
    for (int e = 0; e < E; ++e) order[size_t(e)] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return prob[size_t(a)] > prob[size_t(b)]; });
    double kept = 0;
    for (int k = 0; k < K; ++k) kept += prob[size_t(order[size_t(k)])];
    std::vector<double> ref(H, 0.0);
    for (int k = 0; k < K; ++k) {
      const int e = order[size_t(k)];
      ASSERT_EQ(ids[size_t(t) * K + k], e) << what << ": token " << t << " choice " << k;
      const double w = C::kNormalize ? prob[size_t(e)] / kept : prob[size_t(e)];
      EXPECT_NEAR(weights[size_t(t) * K + k], w, 1e-5) << what;
      std::vector<double> a(F);
      for (int f = 0; f < F; ++f) {
        double g = 0, u = 0;
        for (int i = 0; i < H; ++i) {
          g += double(gate[(size_t(e) * F + f) * H + i]) * x[size_t(t) * H + i];
          u += double(up[(size_t(e) * F + f) * H + i]) * x[size_t(t) * H + i];
        }
        a[size_t(f)] = g / (1.0 + std::exp(-g)) * u;
      }
      for (int j = 0; j < H; ++j) {
        double d = 0;
        for (int f = 0; f < F; ++f) d += double(down[(size_t(e) * H + j) * F + f]) * a[size_t(f)];
        ref[size_t(j)] += w * d;
      }
    }
    for (int j = 0; j < H; ++j)
      ASSERT_NEAR(out[size_t(t) * H + j], ref[size_t(j)], 1e-4 * (1.0 + std::fabs(ref[size_t(j)])))
          << what << ": token " << t << " column " << j;
  }
  for (size_t i = size_t(rows) * H; i < out.size(); ++i) EXPECT_TRUE(std::isnan(out[i])) << what << ": wrote past the batch";
  for (size_t i = size_t(rows) * K; i < ids.size(); ++i) EXPECT_EQ(ids[i], -1) << what << ": routed past the batch";
}

TEST(MoeEmulation, MixtralShapedRenormalized) {
  std::mt19937 rng(25);
  for (int rows : {1, 2, 7, 32})
    runCase<MoeConfig<64, 40, 4, 2, true>>(rng, rows, false, "4 experts, top 2, " + std::to_string(rows) + " rows");
}

TEST(MoeEmulation, Qwen3MoeShapedUnnormalized) {
  std::mt19937 rng(26);
  // Most experts unchosen at one and two rows.
  for (int rows : {1, 2, 7})
    runCase<MoeConfig<48, 24, 8, 3, false>>(rng, rows, false, "8 experts, top 3, " + std::to_string(rows) + " rows");
  // Hidden and ffn past one warp's step of 4 · 32 vectors, with a partial
  // last step and a partial last column tile.
  runCase<MoeConfig<48, 280, 8, 3, false>>(rng, 4, false, "8 experts, top 3, hidden 48, ffn 280");
  runCase<MoeConfig<1064, 24, 8, 3, false>>(rng, 4, false, "8 experts, top 3, hidden 1064, ffn 24");
  runCase<MoeConfig<1064, 280, 8, 3, false>>(rng, 4, false, "8 experts, top 3, hidden 1064, ffn 280");
}

TEST(MoeEmulation, OneExpertTakesEveryToken) {
  std::mt19937 rng(27);
  runCase<MoeConfig<32, 16, 4, 1, true>>(rng, 32, true, "every token to expert 0, top 1, 32 rows");
  runCase<MoeConfig<32, 24, 4, 2, true>>(rng, 32, true, "every token to expert 0, top 2, 32 rows");
  runCase<MoeConfig<32, 16, 4, 1, true, 4>>(rng, 11, true, "every token to expert 0, passes of 4 rows: three");
  runCase<MoeConfig<40, 24, 4, 2, true, 4>>(rng, 7, false, "4 experts, top 2, passes of 4 rows");
}

}  // namespace
}  // namespace kiln::gpu_test
