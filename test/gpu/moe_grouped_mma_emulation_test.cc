// The grouped tensor-core experts (codegen/kernels/moe_grouped_mma.cuh) on
// the host, no GPU, on the emulated device of cuda_emulation.h (ldmatrix,
// mma.m16n8k16 and cp.async from the PTX ISA's tables), against a float64
// forward of the same routed SwiGLU experts: moe_gate_up_mma, moe_down_mma
// and moe.cuh's moe_combine on the grids moe_mma::grid gives, for routings
// chosen here: ragged counts, an expert with no slot, an expert past one
// 16-slot tile, and batches large enough for the 128-slot tiles; column
// counts that leave a partial column tile. Scratch and outputs start as
// NaN: every slot's act and partial row must be written, rows past the
// batch must stay NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "test/gpu/cuda_emulation.h"

#include "codegen/kernels/moe_grouped_mma.cuh"

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;
namespace mm = kiln::kernels::moe_mma;

template <int H, int F, int E, int K>
struct Config {
  using X = kk::bf16;
  using W = kk::bf16;
  using Out = kk::bf16;
  static constexpr int kHidden = H, kFfn = F, kExperts = E, kTopK = K, kThreads = 128;
};

// Each token's K distinct experts: token t takes choose(t, k).
template <class C, class Choose>
void runCase(std::mt19937& rng, int rows, Choose choose, const std::string& what) {
  constexpr int H = C::kHidden, F = C::kFfn, E = C::kExperts, K = C::kTopK;
  constexpr int kPoisonRows = 2;
  std::vector<float> xv, gv, uv, dv;
  const std::vector<uint16_t> x = randomBf16(rng, size_t(rows) * H, 1.0f, &xv);
  const std::vector<uint16_t> gate = randomBf16(rng, size_t(E) * F * H, 1.0f / std::sqrt(float(H)), &gv);
  const std::vector<uint16_t> up = randomBf16(rng, size_t(E) * F * H, 1.0f / std::sqrt(float(H)), &uv);
  const std::vector<uint16_t> down = randomBf16(rng, size_t(E) * H * F, 1.0f / std::sqrt(float(F)), &dv);
  std::vector<int> ids(size_t(rows) * K);
  std::vector<uint16_t> weights(size_t(rows) * K);
  std::uniform_real_distribution<float> share(0.1f, 1.0f);
  std::vector<int> count(E, 0);
  for (int t = 0; t < rows; ++t)
    for (int k = 0; k < K; ++k) {
      const int e = choose(t, k);
      ids[size_t(t) * K + k] = e;
      ++count[size_t(e)];
      weights[size_t(t) * K + k] = toBf16(share(rng));
    }
  const uint16_t nan_bf16 = 0x7fc0;
  const float nan = std::nanf("");
  // act holds bf16 in the grouped path: poisoned past the slots as well.
  std::vector<float> act(size_t(rows + kPoisonRows) * K * F, nan), partial(size_t(rows + kPoisonRows) * K * H, nan);
  std::vector<uint16_t> out(size_t(rows + kPoisonRows) * H, nan_bf16);

  kk::MoeExpertsParams p{x.data(), weights.data(), ids.data(), gate.data(), up.data(), down.data(),
                         act.data(), partial.data(), out.data(), rows};
  emu::readable = {{reinterpret_cast<const unsigned char*>(x.data()), x.size() * 2},
                   {reinterpret_cast<const unsigned char*>(gate.data()), gate.size() * 2},
                   {reinterpret_cast<const unsigned char*>(up.data()), up.size() * 2},
                   {reinterpret_cast<const unsigned char*>(down.data()), down.size() * 2},
                   {reinterpret_cast<const unsigned char*>(act.data()), act.size() * 4}};
  emu::eager_copies = false;
  emu::shuffled_schedule = true;  // a thread running ahead of a missing wait or barrier shows
  const mm::Grid gu = mm::grid(true, rows, K, E, H, F), dn = mm::grid(false, rows, K, E, H, F);
  emu::launch({gu.x, gu.y, 1}, mm::kThreads, [&p] {
    emu::smem_limit = mm::smem_bytes(E);
    kk::moe_gate_up_mma<C>(p);
  });
  ASSERT_TRUE(emu::failure.empty()) << what << ": gate/up: " << emu::failure;
  emu::launch({dn.x, dn.y, 1}, mm::kThreads, [&p] {
    emu::smem_limit = mm::smem_bytes(E);
    kk::moe_down_mma<C>(p);
  });
  ASSERT_TRUE(emu::failure.empty()) << what << ": down: " << emu::failure;
  EXPECT_EQ(emu::bank_conflicts, 0) << what << ": ldmatrix phases with bank conflicts";
  emu::launch({unsigned(rows + kPoisonRows), 1, 1}, 128, [&p] { kk::moe_combine<C>(p); });
  ASSERT_TRUE(emu::failure.empty()) << what << ": combine: " << emu::failure;

  const uint16_t* act_bf16 = reinterpret_cast<const uint16_t*>(act.data());
  double diff = 0, norm = 0;
  for (int t = 0; t < rows; ++t) {
    std::vector<double> ref(H, 0.0);
    for (int k = 0; k < K; ++k) {
      const int slot = t * K + k, e = ids[size_t(slot)];
      // float64 products of the bf16 operands; the activation as the kernel
      // rounds it (gate and up, then the product, to bf16), within 2 bf16 steps.
      std::vector<double> a(F);
      for (int f = 0; f < F; ++f) {
        double g = 0, u = 0;
        for (int i = 0; i < H; ++i) {
          g += double(gv[(size_t(e) * F + f) * H + i]) * xv[size_t(t) * H + i];
          u += double(uv[(size_t(e) * F + f) * H + i]) * xv[size_t(t) * H + i];
        }
        const double gr = roundBf16(float(g)), ur = roundBf16(float(u));
        a[size_t(f)] = roundBf16(float(gr / (1.0 + std::exp(-gr)) * ur));
        const float got = fromBf16(act_bf16[size_t(slot) * F + f]);
        ASSERT_NEAR(got, a[size_t(f)], 1.6e-2 * std::fabs(a[size_t(f)]) + 1e-4)
            << what << ": act of token " << t << " choice " << k << " (expert " << e << ") column " << f;
      }
      const double w = fromBf16(weights[size_t(slot)]);
      for (int j = 0; j < H; ++j) {
        double d = 0;
        for (int f = 0; f < F; ++f) d += double(dv[(size_t(e) * H + j) * F + f]) * a[size_t(f)];
        ASSERT_FALSE(std::isnan(partial[size_t(slot) * H + j])) << what << ": partial of slot " << slot << " not written";
        ref[size_t(j)] += w * d;
      }
    }
    for (int j = 0; j < H; ++j) {
      const double got = fromBf16(out[size_t(t) * H + j]);
      ASSERT_FALSE(std::isnan(got)) << what << ": token " << t << " column " << j;
      diff += (got - ref[size_t(j)]) * (got - ref[size_t(j)]);
      norm += ref[size_t(j)] * ref[size_t(j)];
      EXPECT_NEAR(got, ref[size_t(j)], 2e-2 * (std::fabs(ref[size_t(j)]) + 0.1)) << what << ": token " << t << " column " << j;
    }
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-2) << what << ": relative L2 error of the outputs";
  for (size_t i = size_t(rows) * K * F; i < act.size(); ++i)
    ASSERT_TRUE(std::isnan(act[i])) << what << ": act written past the slots";
  for (size_t i = size_t(rows) * K * H; i < partial.size(); ++i)
    ASSERT_TRUE(std::isnan(partial[i])) << what << ": partial written past the slots";
  for (size_t i = size_t(rows) * H; i < out.size(); ++i)
    ASSERT_EQ(out[i], nan_bf16) << what << ": output written past the batch";
}

TEST(MoeGroupedMmaEmulation, NarrowTilesRaggedWithAnIdleExpert) {
  std::mt19937 rng(251);
  // 4 experts, top 2; expert 3 never chosen, expert 0 by most tokens.
  auto choose = [](int t, int k) { return k == 0 ? (t % 5 == 4 ? 1 : 0) : (t % 3 == 0 ? 2 : 1 + (t % 5 == 4)); };
  runCase<Config<128, 192, 4, 2>>(rng, 1, choose, "1 row, hidden 128, ffn 192");
  runCase<Config<128, 192, 4, 2>>(rng, 7, choose, "7 rows, hidden 128, ffn 192");
  // Expert 0 takes 20 slots: two 16-slot tiles, the second of 4.
  runCase<Config<192, 128, 4, 2>>(rng, 24, choose, "24 rows, hidden 192, ffn 128");
}

TEST(MoeGroupedMmaEmulation, WideTiles) {
  std::mt19937 rng(252);
  static_assert(mm::wide(40, 2, 4) && !mm::wide(32, 2, 4), "past 16 slots an expert on average");
  // Expert 0 in every token, expert 1 in none, 2 and 3 ragged.
  auto choose = [](int t, int k) { return k == 0 ? 0 : (t % 7 == 0 ? 3 : 2); };
  runCase<Config<128, 192, 4, 2>>(rng, 40, choose, "40 rows, hidden 128, ffn 192");
  // Expert 0 past one 128-slot tile: 140 slots.
  runCase<Config<192, 64, 4, 2>>(rng, 140, choose, "140 rows, hidden 192, ffn 64");
}

TEST(MoeGroupedMmaEmulation, SlotTilesBoundTheTilesTaken) {
  // Every expert with a slot rounds up once: the grid's bound.
  EXPECT_EQ(mm::slot_tiles(1, 2, 8, 16), 2);  // two experts, a slot each
  EXPECT_EQ(mm::slot_tiles(32, 2, 8, 16), 11);  // (64 + 8 · 15) / 16
  EXPECT_EQ(mm::slot_tiles(2048, 2, 8, 128), 39);
  EXPECT_EQ(mm::slot_tiles(0, 2, 8, 16), 1);
  EXPECT_EQ(mm::grid(true, 32, 2, 8, 4096, 14336).x, 14336u / 128);
  EXPECT_EQ(mm::grid(true, 2048, 2, 8, 4096, 14336).x, 14336u / 64);
}

}  // namespace
}  // namespace kiln::gpu_test
