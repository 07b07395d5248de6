// The skinny GEMM (codegen/kernels/gemv.cuh) run on the host, no GPU, on
// the emulated device of cuda_emulation.h (a fiber per CUDA thread;
// shuffles and barriers as rendezvous; shared memory NaN at every block's
// start), against float64: the 8-row and single-row tilings, K split over
// warps, weight rows past the matrix, several groups of x rows (grid.z),
// bias, and the SwiGLU epilogue's gate/up pairs. Outputs start as NaN, and
// a poisoned tail past y must stay NaN. The same cases on the card are
// kernels_gpu_test's SkinnyGemm*; this one runs in CI.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "test/gpu/cuda_emulation.h"

// The kernel on the emulated device: after cuda_emulation.h, which supplies its intrinsics.
#include "codegen/kernels/gemv.cuh"

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;

template <int N, int K, int MaxRows, int Split, int RowsPerWarp, int Unroll, bool Bias, bool SiluMul>
struct GemvConfig {
  using Weight = kk::bf16;
  static constexpr int kN = N, kK = K, kMaxRows = MaxRows, kRowsPerWarp = RowsPerWarp;
  static constexpr int kRowsPerBlock = 8 / Split * RowsPerWarp, kSplitK = Split, kUnroll = Unroll;
  static constexpr bool kBias = Bias, kSiluMul = SiluMul, kRope = false;
};

constexpr int kPoison = 8;  // bf16 elements past y that must stay NaN

template <class C>
void runCase(std::mt19937& rng, int rows, const std::string& what) {
  constexpr int n = C::kN, k = C::kK, out_cols = C::kSiluMul ? n / 2 : n;
  std::vector<float> x, w, bias;
  const std::vector<uint16_t> xb = randomBf16(rng, size_t(rows) * k, 1.0f, &x);
  const std::vector<uint16_t> wb = randomBf16(rng, size_t(n) * k, 0.05f, &w);
  const std::vector<uint16_t> bb = randomBf16(rng, size_t(n), 1.0f, &bias);
  std::vector<uint16_t> y(size_t(rows) * out_cols + kPoison, 0xffff);  // NaN
  kk::GemvParams p{xb.data(), wb.data(), C::kBias ? bb.data() : nullptr, y.data(), rows};
  const int per_block = C::kSiluMul ? C::kRowsPerBlock / 2 : C::kRowsPerBlock;
  const unsigned gx = unsigned((out_cols + per_block - 1) / per_block);
  const unsigned gz = unsigned((rows + C::kMaxRows - 1) / C::kMaxRows);
  emu::launch({gx, 1, gz}, 256, [&p] { kk::gemv<C>(p); });
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure << " (block " << blockIdx.x << ", "
                                    << blockIdx.z << ")";

  std::vector<double> ref(size_t(rows) * out_cols);
  auto dot = [&](int m, int j) {
    double s = C::kBias ? bias[size_t(j)] : 0.0;
    for (int i = 0; i < k; ++i) s += double(x[size_t(m) * k + i]) * w[size_t(j) * k + i];
    return s;
  };
  for (int m = 0; m < rows; ++m)
    for (int j = 0; j < out_cols; ++j) {
      if (!C::kSiluMul) {
        ref[size_t(m) * out_cols + j] = dot(m, j);
        continue;
      }
      const double gate = dot(m, j), up = dot(m, out_cols + j);
      ref[size_t(m) * out_cols + j] = gate / (1.0 + std::exp(-gate)) * up;
    }
  std::vector<float> got;
  for (uint16_t bits : y) got.push_back(fromBf16(bits));
  for (size_t i = ref.size(); i < got.size(); ++i) EXPECT_TRUE(std::isnan(got[i])) << what << ": wrote past y at " << i;
  got.resize(ref.size());
  expectClose(got, ref, 5e-3, 1.0 / 64, what);
}

TEST(GemvEmulation, PlainTilings) {
  std::mt19937 rng(11);
  // K long enough that every warp of a split has vectors, with a partial last step.
  // 8 rows a block: 2 warps over K, 2 rows a warp; n 40 leaves part of the last block past the matrix.
  using Eight = GemvConfig<40, 1536, 8, 2, 2, 2, true, false>;
  runCase<Eight>(rng, 3, "8-row tiling, 3 rows of x, bias");
  runCase<Eight>(rng, 9, "8-row tiling, 9 rows of x (two groups)");
  // Single row, K over all 8 warps, 4 loads in flight (the single-row instances' kind).
  runCase<GemvConfig<24, 3072, 1, 8, 1, 4, false, false>>(rng, 1, "single row, K over 8 warps");
  // One warp per row group, no split, K not a multiple of a warp's step.
  runCase<GemvConfig<16, 200, 8, 1, 1, 4, false, false>>(rng, 2, "no split, k 200");
}

TEST(GemvEmulation, SwiGluPairs) {
  std::mt19937 rng(12);
  // Gate row j and up row F + j in one block: 4 rows a block, 2 pairs.
  runCase<GemvConfig<40, 2560, 8, 4, 2, 2, true, true>>(rng, 5, "gate/up pairs, 5 rows, bias");
  // The single-row fused tiling (K over 4 warps, one pair a block).
  runCase<GemvConfig<12, 4096, 1, 4, 1, 4, false, true>>(rng, 1, "gate/up single row");
}

}  // namespace
}  // namespace kiln::gpu_test
