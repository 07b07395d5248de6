#include "runtime/numerics/packed_blocks.h"

#include <cstring>

#include "codegen/kernels/quant_blocks.cuh"

namespace kiln {

namespace {

namespace kk = kiln::kernels;

int quantBits(WeightType type) { return type == WeightType::Q8_0 ? 8 : 4; }

kk::QuantTiles tilesOf(WeightType type, int64_t n, int64_t k, int64_t group) {
  return kk::QuantTiles{n, k, quantBits(type), int(group)};
}

// One block's quants as stored in the tiles (q4: 0..15; q8: q + 128), its
// scale and minimum as f16 bits.
struct BlockValues {
  uint8_t q[32];
  uint16_t d = 0, m = 0;
};

BlockValues readBlock(WeightType type, const uint8_t* at) {
  BlockValues v;
  if (type == WeightType::Q8_0) {
    BlockQ8_0 b;
    std::memcpy(&b, at, sizeof b);
    for (int i = 0; i < 32; ++i) v.q[i] = uint8_t(int(b.qs[i]) + 128);
    v.d = b.d;
    return v;
  }
  const uint8_t* qs;
  BlockQ4_0 b0;
  BlockQ4_1 b1;
  if (type == WeightType::Q4_0) {
    std::memcpy(&b0, at, sizeof b0);
    qs = b0.qs;
    v.d = b0.d;
  } else {
    std::memcpy(&b1, at, sizeof b1);
    qs = b1.qs;
    v.d = b1.d;
    v.m = b1.m;
  }
  // ggml: element i is qs[i]'s low nibble, element 16 + i its high one.
  for (int i = 0; i < 16; ++i) {
    v.q[i] = qs[i] & 15;
    v.q[16 + i] = qs[i] >> 4;
  }
  return v;
}

}  // namespace

int64_t packedBlockBytes(WeightType type, int64_t n, int64_t k, int64_t group) {
  return tilesOf(type, n, k, group).bytes(type == WeightType::Q4_1);
}

Status packBlocks(WeightType type, const uint8_t* blocks, int64_t n, int64_t k, int64_t group,
                  std::vector<uint8_t>& out) {
  if (!isBlockQuantized(type))
    return makeError("packBlocks: {} is not a block-quantized type (q4_0, q4_1, q8_0)", weightTypeName(type));
  if (k % kQuantBlock != 0)
    return makeError("packBlocks: rows of {} elements are not whole {}-element blocks", k, kQuantBlock);
  if (!(group == kQuantBlock || (group % kk::kQuantTileCols == 0 && k % group == 0)))
    return makeError("packBlocks: a group of {} columns, expected 32 or a multiple of 64 dividing k = {}", group, k);
  const kk::QuantTiles tiles = tilesOf(type, n, k, group);
  out.assign(size_t(tiles.bytes(type == WeightType::Q4_1)), 0);
  const int64_t block_bytes = rowBytes(type, kQuantBlock);
  for (int64_t row = 0; row < n; ++row) {
    BlockValues first;  // the group's first block, whose scale the group keeps
    for (int64_t b = 0; b < k / kQuantBlock; ++b) {
      const BlockValues v = readBlock(type, blocks + (row * (k / kQuantBlock) + b) * block_bytes);
      const int64_t col0 = b * kQuantBlock;
      if (col0 % group == 0) {
        first = v;
        const int64_t at = tiles.scale_offset(row, col0 / group);
        std::memcpy(out.data() + tiles.scales_at() + at, &v.d, 2);
        if (type == WeightType::Q4_1) std::memcpy(out.data() + tiles.mins_at() + at, &v.m, 2);
      } else if (v.d != first.d || v.m != first.m) {
        return makeError("packBlocks: row {} block {} has its own scale, expected the one of its {}-column group",
                         row, b, group);
      }
      for (int i = 0; i < kQuantBlock; ++i) {
        const kk::QuantSlot slot = kk::quant_slot(tiles, row, col0 + i);
        uint8_t& byte = out[size_t(slot.byte)];
        if (tiles.bits == 8)
          byte = v.q[i];
        else
          byte = uint8_t(byte | (v.q[i] << (4 * slot.nibble)));
      }
    }
  }
  return {};
}

}  // namespace kiln
