// gemm_swiglu_wgmma's kernel body run on the host, no GPU: the producer's
// tensor copies (TMA, emulated with the 128-byte swizzle and zero fill past
// the matrix), the consumers' warpgroup multiplies, the stages' mbarriers
// and the SwiGLU epilogue on the emulated device of cuda_emulation.h and
// wgmma_emulation.h, against the float64 reference of kernels_gpu_test,
// with the output between NaN guards.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "test/gpu/cuda_emulation.h"
#include "test/gpu/wgmma_emulation.h"

// The kernel on the emulated device: after the emulation headers, which supply its intrinsics.
#include "codegen/kernels/gemm_swiglu_wgmma.cuh"

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;
namespace gs = kiln::kernels::gemm_swiglu;

template <int K_, int F_>
struct Config {
  static constexpr int kHidden = K_, kIntermediate = F_;
  static constexpr int kSmemBytes = gs::smem_bytes();
};

// `blocks` persistent blocks (fewer than the tiles: each walks several,
// and the stages' phases wrap across tiles); shuffled: fibers run in a
// random order each round.
template <class C>
void runCase(int rows, int blocks, const std::string& what, bool shuffled = true) {
  constexpr int K = C::kHidden, F = C::kIntermediate;
  std::mt19937 rng(rows * 131 + K);
  std::vector<float> x, w;
  const std::vector<uint16_t> xb = randomBf16(rng, size_t(rows) * K, 1.0f, &x);
  const std::vector<uint16_t> wb = randomBf16(rng, size_t(2) * F * K, 0.25f, &w);
  std::vector<uint16_t> out(size_t(rows) * F + 128, 0x7fc0);  // NaN, with 64 guard elements each side
  kk::GemmSwiGluParams p{};
  p.x_map = emu::encodeTensorMap(xb.data(), K, rows, gs::kBlockK, gs::kBlockM);
  p.w_map = emu::encodeTensorMap(wb.data(), K, 2LL * F, gs::kBlockK, gs::kBlockN);
  p.out = out.data() + 64;
  p.rows = rows;
  emu::readable = {{reinterpret_cast<const unsigned char*>(xb.data()), xb.size() * 2},
                   {reinterpret_cast<const unsigned char*>(wb.data()), wb.size() * 2}};
  emu::smem_limit = C::kSmemBytes;
  emu::shuffled_schedule = shuffled;
  ASSERT_LT(blocks, gs::tiles(rows, F)) << "the case must make blocks walk several tiles";
  emu::launch({unsigned(blocks), 1, 1}, gs::kThreads, [&] { kk::gemm_swiglu_wgmma<C>(p); });
  emu::shuffled_schedule = false;
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure << " (block " << blockIdx.x << ")";
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(out[i], 0x7fc0) << what << ": write before the output";
    EXPECT_EQ(out[out.size() - 1 - i], 0x7fc0) << what << ": write past the output";
  }
  std::vector<uint16_t> body(out.begin() + 64, out.end() - 64);
  expectClose(bf16ToFloat(body), skinnyGemmReference(x, w, nullptr, rows, 2 * F, K, /*silu_mul=*/true), 2e-3,
              1.0 / 64, what);
}

// Two row tiles, the second partial (its rows past 130 are the TMA's zeros
// and are not stored), two output tiles, three K steps: 4 tiles on 3 blocks.
TEST(GemmSwiGluWgmmaEmulation, PartialRowTileOverTiles) { runCase<Config<192, 256>>(130, 3, "rows 130, K 192, F 256"); }
// Five K steps a tile on four stages, and every tile on one block: the
// stages' phases wrap inside a tile and across tiles.
TEST(GemmSwiGluWgmmaEmulation, StagesWrapOnOneBlock) { runCase<Config<320, 128>>(200, 1, "rows 200, K 320, F 128"); }
// Fewer rows than one consumer warpgroup's 64: the second computes on zeros and stores nothing.
TEST(GemmSwiGluWgmmaEmulation, FewRowsInThreadOrder) {
  runCase<Config<128, 384>>(5, 2, "rows 5, K 128, F 384, fibers in thread order", false);
}

}  // namespace
}  // namespace kiln::gpu_test
