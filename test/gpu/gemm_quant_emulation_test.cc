// The tensor-core GEMM of block-quantized weights (codegen/kernels/
// gemm_quant.cuh) on the host, no GPU, on the emulated device of
// cuda_emulation.h, whose mma follows the PTX ISA's fragment tables: random
// f32 weights quantized to ggml blocks, packed into tiles as the runtime
// packs them (packed_blocks.h), against float64 over the blocks' own
// dequantized values. Covers each block type, one and two x tiles a block,
// several groups of x rows (grid.z), K split over warps with a partial last
// round, k past a 64-column tile, n past a 16-row tile and past the last
// block, bias, a scale shared by a 128-column group, the K-quants'
// sub-blocks (a min each; 16 columns a scale for q6_k); and dequantize.cuh,
// which expands the same tiles for cuBLASLt. Outputs start as NaN, and a
// poisoned tail past y must stay NaN. kernels_gpu_test runs them on the card.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/numerics/packed_blocks.h"
#include "runtime/numerics/quant.h"
#include "test/gpu/cuda_emulation.h"

// The kernels on the emulated device: after cuda_emulation.h, which supplies their intrinsics.
#include "codegen/kernels/dequantize.cuh"
#include "codegen/kernels/gemm_quant.cuh"

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;

template <class W, int N, int K, int Group, int MaxRows, int Split, int Unroll, bool Bias>
struct QuantConfig {
  using Weight = W;
  static constexpr int kN = N, kK = K, kGroup = Group, kMaxRows = MaxRows, kSplitK = Split, kUnroll = Unroll;
  static constexpr int kRowsPerBlock = 8 / Split * 16, kThreads = 256;
  static constexpr bool kBias = Bias, kSiluMul = false, kRope = false;
};

constexpr int kPoison = 8;  // bf16 elements past y that must stay NaN

// An [n, k] weight of `type` blocks (every block of a `group` sharing the
// group's first scale, as kiln's int4 makes them), its tiles, and the
// values the kernel must multiply by.
struct QuantWeight {
  std::vector<uint8_t> tiles;
  std::vector<float> values;
};
QuantWeight quantWeight(std::mt19937& rng, WeightType type, int n, int k, int group) {
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> w(size_t(n) * k);
  for (float& v : w) v = normal(rng);
  const int64_t row_bytes = rowBytes(type, k), block_bytes = rowBytes(type, kQuantBlock);
  std::vector<uint8_t> blocks(size_t(n * row_bytes));
  EXPECT_TRUE(quantizeRow(type, w.data(), blocks.data(), int64_t(n) * k).ok());
  for (int64_t b = 0; b < int64_t(n) * k / kQuantBlock; ++b)
    if (b % (k / kQuantBlock) % (group / kQuantBlock) != 0)  // share the group's first scale (and min)
      std::memcpy(blocks.data() + b * block_bytes, blocks.data() + (b - b % (group / kQuantBlock)) * block_bytes,
                  type == WeightType::Q4_1 ? 4 : 2);
  QuantWeight q;
  q.values.resize(w.size());
  EXPECT_TRUE(dequantizeRow(type, blocks.data(), q.values.data(), int64_t(n) * k).ok());
  EXPECT_TRUE(packBlocks(type, blocks.data(), n, k, group, q.tiles).ok());
  return q;
}

// gemm_quant over `tiles` (whose values are `w`) on `rows` rows of x, y
// against float64, a poisoned tail past y left NaN.
template <class C>
void launchAndCheck(const std::vector<uint16_t>& xb, const std::vector<float>& x, const std::vector<uint8_t>& tiles,
                    const std::vector<float>& w, const std::vector<uint16_t>& bb, const std::vector<float>& bias,
                    int rows, const std::string& what) {
  constexpr int n = C::kN, k = C::kK;
  std::vector<uint16_t> y(size_t(rows) * n + kPoison, 0xffff);  // NaN
  kk::GemvParams p{xb.data(), tiles.data(), C::kBias ? bb.data() : nullptr, y.data(), rows};
  emu::launch({unsigned((n + C::kRowsPerBlock - 1) / C::kRowsPerBlock), 1, unsigned((rows + C::kMaxRows - 1) / C::kMaxRows)},
              256, [&p] { kk::gemm_quant<C>(p); });
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure;
  std::vector<float> got;
  for (uint16_t bits : y) got.push_back(fromBf16(bits));
  const std::vector<double> ref = skinnyGemmReference(x, w, C::kBias ? &bias : nullptr, rows, n, k, false);
  for (size_t i = ref.size(); i < got.size(); ++i) EXPECT_TRUE(std::isnan(got[i])) << what << ": wrote past y at " << i;
  got.resize(ref.size());
  expectClose(got, ref, 5e-3, 1.0 / 64, what);
}

template <class C>
void runCase(std::mt19937& rng, WeightType type, int rows, const std::string& what) {
  constexpr int n = C::kN, k = C::kK;
  std::vector<float> x, bias;
  const std::vector<uint16_t> xb = randomBf16(rng, size_t(rows) * k, 1.0f, &x);
  const std::vector<uint16_t> bb = randomBf16(rng, size_t(n), 1.0f, &bias);
  const QuantWeight w = quantWeight(rng, type, n, k, C::kGroup);
  ASSERT_EQ(int64_t(w.tiles.size()), packedBlockBytes(type, n, k, C::kGroup));
  launchAndCheck<C>(xb, x, w.tiles, w.values, bb, bias, rows, what);
}

TEST(GemmQuantEmulation, EachBlockType) {
  std::mt19937 rng(16);
  // SmolLM2's k 576 (9 tiles over 2 warps: a partial last round), bias.
  runCase<QuantConfig<kk::PackedQ4_1, 32, 576, 32, 8, 2, 2, true>>(rng, WeightType::Q4_1, 5, "q4_1, k 576, 5 rows, bias");
  runCase<QuantConfig<kk::PackedQ4_0, 48, 1024, 32, 8, 4, 2, false>>(rng, WeightType::Q4_0, 1, "q4_0, one row");
  runCase<QuantConfig<kk::PackedQ8_0, 33, 576, 32, 8, 1, 4, true>>(rng, WeightType::Q8_0, 3,
                                                                    "q8_0, n 33 past the last tile, bias");
}

TEST(GemmQuantEmulation, RowsAndGroups) {
  std::mt19937 rng(17);
  // Two x tiles a block; 21 rows: a second block along z with 5.
  runCase<QuantConfig<kk::PackedQ4_0, 40, 512, 32, 16, 8, 1, false>>(rng, WeightType::Q4_0, 21,
                                                                     "q4_0, 16-row blocks, 21 rows");
  runCase<QuantConfig<kk::PackedQ8_0, 16, 256, 32, 16, 2, 2, false>>(rng, WeightType::Q8_0, 16, "q8_0, 16 rows");
  // k 96: the second tile's last two steps are padding.
  runCase<QuantConfig<kk::PackedQ4_1, 20, 96, 32, 8, 2, 1, true>>(rng, WeightType::Q4_1, 9,
                                                                  "q4_1, k 96 past a tile, 9 rows");
  // One scale a 128-column group (kiln's int4 g128), and per channel (int8).
  runCase<QuantConfig<kk::PackedQ4_0, 32, 512, 128, 8, 2, 2, false>>(rng, WeightType::Q4_0, 4, "q4_0, group 128");
  runCase<QuantConfig<kk::PackedQ8_0, 16, 384, 384, 8, 2, 2, true>>(rng, WeightType::Q8_0, 2,
                                                                    "q8_0 per channel (group = k)");
}

// K-quant rows: random super-blocks with plausible scales, the tiles the
// runtime packs, against float64 over dequantizeRow's values (the tiles
// round the sub-block scales to f16).
template <class C>
void runKQuantCase(std::mt19937& rng, WeightType type, int rows, const std::string& what) {
  constexpr int n = C::kN, k = C::kK;
  std::vector<uint8_t> blocks(size_t(n * rowBytes(type, k)));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : blocks) b = uint8_t(byte(rng));
  const int64_t block = rowBytes(type, kSuperBlock);
  const uint16_t d = f32ToF16(0.0005f), dmin = f32ToF16(0.001f);
  for (int64_t b = 0; b < int64_t(n) * (k / kSuperBlock); ++b) {
    uint8_t* at = blocks.data() + b * block;
    if (type == WeightType::Q6_K) {
      std::memcpy(at + block - 2, &d, 2);  // d ends a q6_k block
    } else {
      std::memcpy(at, &d, 2);
      std::memcpy(at + 2, &dmin, 2);
    }
  }
  std::vector<float> w(size_t(n) * k), x, bias;
  ASSERT_TRUE(dequantizeRow(type, blocks.data(), w.data(), int64_t(n) * k).ok());
  std::vector<uint8_t> tiles;
  ASSERT_TRUE(packBlocks(type, blocks.data(), n, k, 0, tiles).ok());
  const std::vector<uint16_t> xb = randomBf16(rng, size_t(rows) * k, 1.0f, &x);
  const std::vector<uint16_t> bb = randomBf16(rng, size_t(n), 1.0f, &bias);
  launchAndCheck<C>(xb, x, tiles, w, bb, bias, rows, what);
}

TEST(GemmQuantEmulation, KQuantSubBlocks) {
  std::mt19937 rng(19);
  // q4_k as q4_1-like tiles, q5_k in 8-bit tiles with mins, q6_k with a scale per 16 columns.
  runKQuantCase<QuantConfig<kk::PackedQ4_1, 32, 512, 32, 8, 2, 2, true>>(rng, WeightType::Q4_K, 3, "q4_k, 3 rows, bias");
  runKQuantCase<QuantConfig<kk::PackedQ5_K, 24, 512, 32, 16, 4, 2, false>>(rng, WeightType::Q5_K, 11, "q5_k, 11 rows");
  runKQuantCase<QuantConfig<kk::PackedQ8_0, 16, 768, 16, 8, 2, 4, false>>(rng, WeightType::Q6_K, 1, "q6_k, one row");
}

template <class C>
void runDequantizeCase(std::mt19937& rng, WeightType type, const std::string& what) {
  constexpr int n = C::kN, k = C::kK;
  const QuantWeight w = quantWeight(rng, type, n, k, C::kGroup);
  std::vector<uint16_t> out(size_t(n) * k + kPoison, 0xffff);
  kk::DequantizeParams p{w.tiles.data(), out.data()};
  const long long items = (n + 15) / 16 * ((k + 63) / 64) * 128;
  emu::launch({unsigned((items + C::kThreads - 1) / C::kThreads), 1, 1}, C::kThreads, [&p] { kk::dequantize<C>(p); });
  ASSERT_TRUE(emu::failure.empty()) << what << ": " << emu::failure;
  // d·q + m in one rounding (fma) or two (the CPU's) differ by an f32 ulp
  // at most, which bf16 rounding keeps within one of its own.
  for (size_t i = 0; i < w.values.size(); ++i)
    ASSERT_LE(std::fabs(fromBf16(out[i]) - w.values[i]), std::fabs(w.values[i]) / 128 + 1e-30) << what << ": element " << i;
  for (size_t i = w.values.size(); i < out.size(); ++i) EXPECT_TRUE(std::isnan(fromBf16(out[i]))) << what;
}

TEST(GemmQuantEmulation, DequantizeForCublas) {
  std::mt19937 rng(18);
  runDequantizeCase<QuantConfig<kk::PackedQ4_1, 20, 96, 32, 8, 1, 1, false>>(rng, WeightType::Q4_1, "q4_1 20 x 96");
  runDequantizeCase<QuantConfig<kk::PackedQ4_0, 16, 256, 128, 8, 1, 1, false>>(rng, WeightType::Q4_0, "q4_0 g128");
  runDequantizeCase<QuantConfig<kk::PackedQ8_0, 33, 64, 32, 8, 1, 1, false>>(rng, WeightType::Q8_0, "q8_0 33 x 64");
}

}  // namespace
}  // namespace kiln::gpu_test
