// The mma-order metadata checked against mma.sp m16n8k32 (16-bit operands)
// as the PTX ISA describes it ("Sparse matrix storage", the m16n8k32
// .f16/.bf16 fragments and metadata): each lane's A fragment of kept values
// and the metadata word of the selected lane pair of its quad expand to the
// dense 16 x 32 A, whose product with B must be W's; and the GEMM's shared
// tile of kept values reads without bank conflicts.
#include "runtime/cuda/executor/sparse24_layout.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

#include "codegen/kernels/sparse24_mma.cuh"  // sparse24_value_offset (host-visible)

namespace kiln::cuda {
namespace {

// A random 2:4 pattern: the canonical metadata of an [n, k] weight.
std::vector<uint32_t> randomMetadata(int64_t n, int64_t k, std::mt19937& rng) {
  static constexpr int kPairs[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
  std::vector<uint32_t> meta(size_t(n * k / 32), 0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < k / 4; ++g) {
      const int* pair = kPairs[rng() % 6];
      meta[size_t(r * (k / 32) + g / 8)] |= uint32_t(pair[0] | pair[1] << 2) << (4 * (g % 8));
    }
  return meta;
}

// The nibble of group `group` of the 32-column step that the PTX ISA's
// metadata layout assigns, for `row` of a 16-row tile, to the lane pair
// `selector` of its quad: lane 4 (row % 8) + 2 selector + group / 4, bits
// 4 (group % 4) (+ 16 for rows 8-15).
uint32_t ptxMetadataNibble(const uint32_t (&lanes)[32], int row, int group, int selector) {
  const int lane = 4 * (row % 8) + 2 * selector + group / 4;
  return (lanes[lane] >> (4 * (group % 4) + (row >= 8 ? 16 : 0))) & 0xF;
}

TEST(Sparse24Layout, MmaOrderDecodesToCanonicalIndices) {
  std::mt19937 rng(24);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{48, 128}, {40, 192}, {16, 64}}) {
    const std::vector<uint32_t> canonical = randomMetadata(n, k, rng);
    const std::vector<uint32_t> mma = sparse24MmaMetadata(canonical.data(), n, k);
    ASSERT_EQ(int64_t(mma.size()), sparse24MmaMetadataWords(n, k));
    for (int64_t tile = 0; tile < (n + 15) / 16; ++tile)
      for (int64_t step = 0; step < k / 32; ++step) {
        uint32_t lanes[32];
        for (int l = 0; l < 32; ++l) lanes[l] = mma[size_t((tile * (k / 64) + step / 2) * 32 + l)];
        for (int row = 0; row < 16; ++row)
          for (int group = 0; group < 8; ++group) {
            const uint32_t nibble = ptxMetadataNibble(lanes, row, group, int(step % 2));
            const int64_t r = 16 * tile + row;
            if (r < n) {
              const int64_t g = step * 8 + group;
              EXPECT_EQ(nibble, (canonical[size_t(r * (k / 32) + g / 8)] >> (4 * (g % 8))) & 0xF)
                  << "row " << r << " group " << g;
            } else {
              EXPECT_LT(nibble & 3, nibble >> 2) << "padding row " << r << " needs a valid pattern";
            }
          }
      }
  }
}

// One mma.sp m16n8k32 emulated from the PTX ISA's tables: A's kept values
// from each lane's fragment (the dense m16n8k16 A layout over the 16 x 16
// kept values: a0 row g, kept columns 2t, 2t+1; a1 row g + 8; a2, a3 the same
// at 2t + 8), each placed at the column its group's metadata names, times B.
TEST(Sparse24Layout, EmulatedMmaSpMatchesDenseProduct) {
  std::mt19937 rng(25);
  constexpr int64_t n = 32, k = 128;
  const std::vector<uint32_t> canonical = randomMetadata(n, k, rng);
  const std::vector<uint32_t> mma = sparse24MmaMetadata(canonical.data(), n, k);
  std::uniform_real_distribution<float> u(-1, 1);
  // Dense pruned W and its kept values in the layout's order.
  std::vector<float> w(n * k, 0.0f), kept(n * k / 2);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < k / 4; ++g) {
      const uint32_t nibble = (canonical[size_t(r * (k / 32) + g / 8)] >> (4 * (g % 8))) & 0xF;
      for (int e = 0; e < 2; ++e) {
        const float v = u(rng);
        kept[size_t(r * (k / 2) + 2 * g + e)] = v;
        w[size_t(r * k + 4 * g + (e ? nibble >> 2 : nibble & 3))] = v;
      }
    }
  std::vector<float> b(k * 8);  // B [k, 8]: 8 x rows as its columns
  for (float& v : b) v = u(rng);
  for (int64_t tile = 0; tile < n / 16; ++tile) {
    double d[16][8] = {};
    for (int64_t step = 0; step < k / 32; ++step) {
      uint32_t lanes[32];
      for (int l = 0; l < 32; ++l) lanes[l] = mma[size_t((tile * (k / 64) + step / 2) * 32 + l)];
      double a[16][32] = {};
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        for (int reg = 0; reg < 4; ++reg)
          for (int half = 0; half < 2; ++half) {
            const int row = g + (reg % 2) * 8, kept_col = 2 * t + half + (reg / 2) * 8;  // of the step's 16
            const float value = kept[size_t((16 * tile + row) * (k / 2) + step * 16 + kept_col)];
            const int group = kept_col / 2;
            const uint32_t nibble = ptxMetadataNibble(lanes, row, group, int(step % 2));
            a[row][4 * group + int(kept_col % 2 ? nibble >> 2 : nibble & 3)] += value;
          }
      }
      for (int row = 0; row < 16; ++row)
        for (int col = 0; col < 8; ++col)
          for (int c = 0; c < 32; ++c) d[row][col] += a[row][c] * b[size_t((step * 32 + c) * 8 + col)];
    }
    for (int row = 0; row < 16; ++row)
      for (int col = 0; col < 8; ++col) {
        double want = 0;
        for (int c = 0; c < k; ++c) want += double(w[size_t((16 * tile + row) * k + c)]) * b[size_t(c * 8 + col)];
        EXPECT_NEAR(d[row][col], want, 1e-9) << "tile " << tile << " row " << row << " col " << col;
      }
  }
}

// The GEMM's shared tile of kept values ([rows][32] bf16, 64-byte rows):
// each row's 4 chunks stay in the row, and an ldmatrix phase (8 rows of one
// chunk, from a multiple of 8) touches 8 distinct 16-byte bank groups.
TEST(Sparse24Layout, SharedValueTileIsConflictFree) {
  using kiln::kernels::sparse24_value_offset;
  for (int row = 0; row < 128; ++row) {
    std::set<int> chunks;
    for (int c = 0; c < 4; ++c) {
      const int at = sparse24_value_offset(row, c);
      EXPECT_EQ(at / 64, row);
      chunks.insert(at % 64 / 16);
    }
    EXPECT_EQ(chunks.size(), 4u);
  }
  for (int row0 = 0; row0 < 128; row0 += 8)
    for (int c = 0; c < 4; ++c) {
      std::set<int> banks;
      for (int r = 0; r < 8; ++r) banks.insert(sparse24_value_offset(row0 + r, c) / 16 % 8);
      EXPECT_EQ(banks.size(), 8u) << "rows " << row0 << ".. chunk " << c;
    }
}

TEST(Sparse24Layout, MetadataPlaneStartsAtSixteenBytes) {
  EXPECT_EQ(sparse24MetadataOffset(3, 18 * 9), 496);  // 486 bytes of q4_0 values, rounded up
  EXPECT_EQ(sparse24MetadataOffset(4096, 4096), 4096 * 4096);
}

}  // namespace
}  // namespace kiln::cuda
