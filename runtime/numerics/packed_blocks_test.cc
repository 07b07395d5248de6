// The tensor-core tiles of packed_blocks.h: every element of a block lands
// in its own quant slot, read back with its group's scale (and minimum) it
// is the value dequantizeRow gives, and the padding is zero. Whether the
// slots are the mma fragments the kernels need is gemm_quant's emulation
// test's to say (test/gpu/gemm_quant_emulation_test.cc).
#include "runtime/numerics/packed_blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <set>
#include <utility>

#include "codegen/kernels/quant_blocks.cuh"
#include "runtime/numerics/quant.h"

namespace kiln {
namespace {

namespace kk = kiln::kernels;

float f16At(const std::vector<uint8_t>& bytes, int64_t offset) {
  uint16_t bits;
  std::memcpy(&bits, bytes.data() + offset, 2);
  return f16ToF32(bits);
}

// Rows of x quantized to `type` blocks, with every block of a `group`
// sharing one scale when group > 32 (as kiln's own int4 makes them).
std::vector<uint8_t> blocksOf(WeightType type, const std::vector<float>& x, int64_t n, int64_t k, int64_t group) {
  std::vector<uint8_t> blocks(size_t(n * rowBytes(type, k)));
  EXPECT_TRUE(quantizeRow(type, x.data(), blocks.data(), n * k).ok());
  if (group == kQuantBlock) return blocks;
  const int64_t block_bytes = rowBytes(type, kQuantBlock);
  for (int64_t b = 0; b < n * k / kQuantBlock; ++b)
    if ((b % (k / kQuantBlock)) * kQuantBlock % group != 0)  // not a group's first: take its scale and min
      std::memcpy(blocks.data() + b * block_bytes, blocks.data() + (b - b % (group / kQuantBlock)) * block_bytes,
                  type == WeightType::Q4_1 ? 4 : 2);
  return blocks;
}

TEST(PackedBlocks, TilesHoldTheBlocksValues) {
  struct Shape {
    int64_t n, k, group;
  };
  // Rows past a 16-row tile, k past a 64-column tile, a shared-scale group.
  for (Shape shape : {Shape{19, 96, 32}, Shape{16, 64, 32}, Shape{5, 256, 128}, Shape{3, 192, 192}}) {
    const auto [n, k, group] = shape;
    std::vector<float> x(size_t(n * k));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(0.37 * double(i)) * (1 + i % 5));
    for (WeightType type : {WeightType::Q4_0, WeightType::Q4_1, WeightType::Q8_0}) {
      SCOPED_TRACE(std::string(weightTypeName(type)) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                   " group " + std::to_string(group));
      const std::vector<uint8_t> blocks = blocksOf(type, x, n, k, group);
      std::vector<float> want(x.size());
      ASSERT_TRUE(dequantizeRow(type, blocks.data(), want.data(), n * k).ok());
      std::vector<uint8_t> packed;
      ASSERT_TRUE(packBlocks(type, blocks.data(), n, k, group, packed).ok());
      ASSERT_EQ(int64_t(packed.size()), packedBlockBytes(type, n, k, group));
      const kk::QuantTiles tiles{n, k, type == WeightType::Q8_0 ? 8 : 4, int(group)};
      std::set<std::pair<int64_t, int>> slots;
      // Every element of the padded tiles, the padding included.
      for (int64_t row = 0; row < tiles.row_tiles() * 16; ++row)
        for (int64_t col = 0; col < tiles.k_tiles() * 64; ++col) {
          const kk::QuantSlot slot = kk::quant_slot(tiles, row, col);
          ASSERT_LT(slot.byte, tiles.quant_bytes());
          ASSERT_TRUE(slots.insert({slot.byte, slot.nibble}).second) << "two elements in one slot at " << row << ", " << col;
          const int q = tiles.bits == 8 ? packed[size_t(slot.byte)] - 128 : (packed[size_t(slot.byte)] >> (4 * slot.nibble)) & 15;
          if (row >= n || col >= k) {
            EXPECT_EQ(q, tiles.bits == 8 ? -128 : 0) << "padding at " << row << ", " << col;
            continue;
          }
          const int64_t at = tiles.scale_offset(row, col / group);
          const float d = f16At(packed, tiles.scales_at() + at);
          const float got = type == WeightType::Q4_0   ? d * float(q - 8)
                            : type == WeightType::Q4_1 ? d * float(q) + f16At(packed, tiles.mins_at() + at)
                                                       : d * float(q);
          ASSERT_EQ(got, want[size_t(row * k + col)]) << "element " << row << ", " << col;
        }
    }
  }
}

// Random K-quant super-blocks: random bytes with scales of a plausible size.
std::vector<uint8_t> randomKQuantRows(WeightType type, int64_t n, int64_t k, uint32_t seed) {
  std::vector<uint8_t> bytes(size_t(n * rowBytes(type, k)));
  uint32_t state = seed;
  for (uint8_t& b : bytes) b = uint8_t((state = state * 1664525u + 1013904223u) >> 24);
  const int64_t block = rowBytes(type, kSuperBlock);
  for (int64_t b = 0; b < n * (k / kSuperBlock); ++b) {
    uint8_t* at = bytes.data() + b * block;
    const uint16_t d = f32ToF16(0.002f + 0.001f * float(b % 3)), dmin = f32ToF16(0.004f);
    if (type == WeightType::Q6_K) {
      std::memcpy(at + offsetof(BlockQ6_K, d), &d, 2);
    } else {
      std::memcpy(at, &d, 2);  // d, then dmin, lead q4_k and q5_k
      std::memcpy(at + 2, &dmin, 2);
    }
  }
  return bytes;
}

// The K-quants' tiles: the quants exactly, the scales (and mins) as
// d·scale (and -dmin·min) rounded to f16, so each element is within a
// relative 2^-11 of its scale of dequantizeRow's value.
TEST(PackedBlocks, KQuantTilesHoldTheSubBlocksValues) {
  const int64_t n = 20, k = 512;
  for (WeightType type : {WeightType::Q4_K, WeightType::Q5_K, WeightType::Q6_K}) {
    SCOPED_TRACE(std::string(weightTypeName(type)));
    const std::vector<uint8_t> blocks = randomKQuantRows(type, n, k, 7);
    std::vector<float> want(size_t(n * k));
    ASSERT_TRUE(dequantizeRow(type, blocks.data(), want.data(), n * k).ok());
    std::vector<uint8_t> packed;
    ASSERT_TRUE(packBlocks(type, blocks.data(), n, k, 0, packed).ok());
    ASSERT_EQ(int64_t(packed.size()), packedBlockBytes(type, n, k));
    const int64_t group = quantTileGroup(type);
    const kk::QuantTiles tiles{n, k, type == WeightType::Q4_K ? 4 : 8, int(group)};
    const bool mins = type != WeightType::Q6_K;
    for (int64_t row = 0; row < n; ++row)
      for (int64_t col = 0; col < k; ++col) {
        const kk::QuantSlot slot = kk::quant_slot(tiles, row, col);
        const int q = tiles.bits == 8 ? packed[size_t(slot.byte)] - 128 : (packed[size_t(slot.byte)] >> (4 * slot.nibble)) & 15;
        const int64_t at = tiles.scale_offset(row, col / group);
        const float d = f16At(packed, tiles.scales_at() + at);
        const float got = d * float(q) + (mins ? f16At(packed, tiles.mins_at() + at) : 0.0f);
        const float w = want[size_t(row * k + col)];
        // q's range times the f16 rounding of the scale and of the min.
        ASSERT_NEAR(got, w, std::fabs(d) * 64 / 2048 + 0.004f * 63 / 2048 + 1e-7f) << "element " << row << ", " << col;
      }
  }
}

TEST(PackedBlocks, RefusesWhatTheTilesCannotHold) {
  std::vector<uint8_t> out;
  EXPECT_FALSE(packBlocks(WeightType::BF16, nullptr, 1, 32, 32, out).ok());
  EXPECT_FALSE(packBlocks(WeightType::Q6_K, nullptr, 1, 384, 0, out).ok());  // not whole super-blocks
  EXPECT_FALSE(packBlocks(WeightType::Q4_0, nullptr, 1, 48, 32, out).ok());
  EXPECT_FALSE(packBlocks(WeightType::Q4_0, nullptr, 1, 128, 96, out).ok());  // not a multiple of 64
  // Blocks of one 64-column group with different scales.
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[size_t(i)] = float(i < 32 ? i : 10 * i);
  std::vector<uint8_t> blocks(size_t(rowBytes(WeightType::Q4_0, 64)));
  ASSERT_TRUE(quantizeRow(WeightType::Q4_0, x.data(), blocks.data(), 64).ok());
  Status s = packBlocks(WeightType::Q4_0, blocks.data(), 1, 64, 64, out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("its own scale"), std::string::npos) << s.error().message;
}

}  // namespace
}  // namespace kiln
