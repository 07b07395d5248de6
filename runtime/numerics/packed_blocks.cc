#include "runtime/numerics/packed_blocks.h"

#include <cstring>

#include "codegen/kernels/quant_blocks.cuh"
#include "runtime/numerics/quant.h"

namespace kiln {

namespace {

namespace kk = kiln::kernels;

// 8-bit tiles hold q + 128 (offset binary), 4-bit ones q.
int quantBits(WeightType type) { return type == WeightType::Q4_0 || type == WeightType::Q4_1 || type == WeightType::Q4_K ? 4 : 8; }
bool hasMins(WeightType type) { return type == WeightType::Q4_1 || type == WeightType::Q4_K || type == WeightType::Q5_K; }

kk::QuantTiles tilesOf(WeightType type, int64_t n, int64_t k, int64_t group) {
  return kk::QuantTiles{n, k, quantBits(type), int(group == 0 ? quantTileGroup(type) : group)};
}

// One sub-block of a row as the tiles store it: its quants (4-bit: 0..15;
// 8-bit: q + 128), its scale and minimum as f16 bits.
struct SubBlock {
  uint8_t q[32];
  uint16_t d = 0, m = 0;
};

SubBlock readQ8_0(const uint8_t* at) {
  BlockQ8_0 b;
  std::memcpy(&b, at, sizeof b);
  SubBlock v;
  for (int i = 0; i < 32; ++i) v.q[i] = uint8_t(int(b.qs[i]) + 128);
  v.d = b.d;
  return v;
}

SubBlock readQ4(WeightType type, const uint8_t* at) {
  SubBlock v;
  uint8_t qs[16];
  if (type == WeightType::Q4_0) {
    BlockQ4_0 b;
    std::memcpy(&b, at, sizeof b);
    std::memcpy(qs, b.qs, 16);
    v.d = b.d;
  } else {
    BlockQ4_1 b;
    std::memcpy(&b, at, sizeof b);
    std::memcpy(qs, b.qs, 16);
    v.d = b.d;
    v.m = b.m;
  }
  // ggml: element i is qs[i]'s low nibble, element 16 + i its high one.
  for (int i = 0; i < 16; ++i) {
    v.q[i] = qs[i] & 15;
    v.q[16 + i] = qs[i] >> 4;
  }
  return v;
}

// The 8 sub-blocks of 32 of a q4_k or q5_k super-block.
void readQ45K(WeightType type, const uint8_t* at, SubBlock (&out)[16]) {
  const uint8_t *scales, *qs, *qh = nullptr;
  uint16_t d_bits, dmin_bits;
  BlockQ4_K b4;
  BlockQ5_K b5;
  if (type == WeightType::Q4_K) {
    std::memcpy(&b4, at, sizeof b4);
    scales = b4.scales, qs = b4.qs, d_bits = b4.d, dmin_bits = b4.dmin;
  } else {
    std::memcpy(&b5, at, sizeof b5);
    scales = b5.scales, qs = b5.qs, qh = b5.qh, d_bits = b5.d, dmin_bits = b5.dmin;
  }
  const float d = f16ToF32(d_bits), dmin = f16ToF32(dmin_bits);
  for (int j = 0; j < 8; ++j) {
    const KQuantScale s = kQuantScale(scales, j);
    SubBlock& v = out[j];
    v.d = f32ToF16(d * float(s.scale));
    v.m = f32ToF16(-(dmin * float(s.min)));
    for (int l = 0; l < 32; ++l) {
      int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
      if (qh) q = uint8_t(q | (((qh[l] >> j) & 1) << 4)) + 128;
      v.q[l] = uint8_t(q);
    }
  }
}

// The 16 sub-blocks of 16 of a q6_k super-block (q[0..15] used).
void readQ6K(const uint8_t* at, SubBlock (&out)[16]) {
  BlockQ6_K b;
  std::memcpy(&b, at, sizeof b);
  const float d = f16ToF32(b.d);
  for (int j = 0; j < 16; ++j) {
    out[j].d = f32ToF16(d * float(b.scales[j]));
    for (int l = 0; l < 16; ++l) out[j].q[l] = uint8_t(q6kQuant(b, 16 * j + l) - 32 + 128);
  }
}

// The sub-blocks of one row, in column order.
std::vector<SubBlock> readRow(WeightType type, const uint8_t* row, int64_t k) {
  std::vector<SubBlock> subs;
  if (isBlockQuantized(type)) {
    const int64_t bytes = rowBytes(type, kQuantBlock);
    for (int64_t b = 0; b < k / kQuantBlock; ++b)
      subs.push_back(type == WeightType::Q8_0 ? readQ8_0(row + b * bytes) : readQ4(type, row + b * bytes));
    return subs;
  }
  const int64_t bytes = rowBytes(type, kSuperBlock);
  for (int64_t b = 0; b < k / kSuperBlock; ++b) {
    SubBlock super[16];
    if (type == WeightType::Q6_K)
      readQ6K(row + b * bytes, super);
    else
      readQ45K(type, row + b * bytes, super);
    subs.insert(subs.end(), super, super + (type == WeightType::Q6_K ? 16 : 8));
  }
  return subs;
}

}  // namespace

int64_t packedBlockBytes(WeightType type, int64_t n, int64_t k, int64_t group) {
  return tilesOf(type, n, k, group).bytes(hasMins(type));
}

Status packBlocks(WeightType type, const uint8_t* blocks, int64_t n, int64_t k, int64_t group,
                  std::vector<uint8_t>& out) {
  if (!hasQuantTiles(type))
    return makeError("packBlocks: {} has no tile form (q4_0, q4_1, q8_0, q4_k, q5_k, q6_k)", weightTypeName(type));
  const int64_t block = quantBlockElements(type), sub = quantTileGroup(type);
  if (k % block != 0) return makeError("packBlocks: rows of {} elements are not whole {}-element blocks", k, block);
  if (group == 0) group = sub;
  if (!(group == sub || (group % kk::kQuantTileCols == 0 && k % group == 0)))
    return makeError("packBlocks: a group of {} columns, expected {} or a multiple of 64 dividing k = {}", group, sub, k);
  const kk::QuantTiles tiles = tilesOf(type, n, k, group);
  out.assign(size_t(tiles.bytes(hasMins(type))), 0);
  for (int64_t row = 0; row < n; ++row) {
    const std::vector<SubBlock> subs = readRow(type, blocks + row * rowBytes(type, k), k);
    SubBlock first;  // the group's first sub-block, whose scale the group keeps
    for (size_t b = 0; b < subs.size(); ++b) {
      const SubBlock& v = subs[b];
      const int64_t col0 = int64_t(b) * sub;
      if (col0 % group == 0) {
        first = v;
        const int64_t at = tiles.scale_offset(row, col0 / group);
        std::memcpy(out.data() + tiles.scales_at() + at, &v.d, 2);
        if (hasMins(type)) std::memcpy(out.data() + tiles.mins_at() + at, &v.m, 2);
      } else if (v.d != first.d || v.m != first.m) {
        return makeError("packBlocks: row {} block {} has its own scale, expected the one of its {}-column group",
                         row, b, group);
      }
      for (int64_t i = 0; i < sub; ++i) {
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
