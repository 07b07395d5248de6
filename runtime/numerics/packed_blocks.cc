#include "runtime/numerics/packed_blocks.h"

#include <cstring>

namespace kiln {

namespace {

int quantBits(WeightType type) { return type == WeightType::Q8_0 ? 8 : 4; }

}  // namespace

int64_t packedBlockBytes(WeightType type, int64_t n, int64_t k) {
  const int64_t blocks = n * (k / kQuantBlock);
  return n * k * quantBits(type) / 8 + blocks * 2 * (type == WeightType::Q4_1 ? 2 : 1);
}

Status packBlocks(WeightType type, const uint8_t* blocks, int64_t n, int64_t k, std::vector<uint8_t>& out) {
  if (!isBlockQuantized(type))
    return makeError("packBlocks: {} is not a block-quantized type (q4_0, q4_1, q8_0)", weightTypeName(type));
  if (k % kQuantBlock != 0)
    return makeError("packBlocks: rows of {} elements are not whole {}-element blocks", k, kQuantBlock);
  out.assign(size_t(packedBlockBytes(type, n, k)), 0);
  const int64_t count = n * (k / kQuantBlock);  // blocks in row-major order
  const int64_t block_quant_bytes = kQuantBlock * quantBits(type) / 8;
  uint8_t* quants = out.data();
  uint8_t* scales = quants + count * block_quant_bytes;
  uint8_t* mins = scales + count * 2;
  for (int64_t b = 0; b < count; ++b) {
    uint8_t* q = quants + b * block_quant_bytes;
    switch (type) {
      case WeightType::Q8_0: {
        BlockQ8_0 blk;
        std::memcpy(&blk, blocks + b * sizeof blk, sizeof blk);
        std::memcpy(q, blk.qs, 32);
        std::memcpy(scales + b * 2, &blk.d, 2);
        break;
      }
      case WeightType::Q4_0:
      case WeightType::Q4_1: {
        const uint8_t* qs;
        uint16_t d, m = 0;
        BlockQ4_0 b0;
        BlockQ4_1 b1;
        if (type == WeightType::Q4_0) {
          std::memcpy(&b0, blocks + b * sizeof b0, sizeof b0);
          qs = b0.qs;
          d = b0.d;
        } else {
          std::memcpy(&b1, blocks + b * sizeof b1, sizeof b1);
          qs = b1.qs;
          d = b1.d;
          m = b1.m;
        }
        // ggml: element i is qs[i]'s low nibble, element 16 + i its high one.
        auto element = [&](int i) { return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4; };
        for (int j = 0; j < 16; ++j) q[j] = uint8_t(element(2 * j) | element(2 * j + 1) << 4);
        std::memcpy(scales + b * 2, &d, 2);
        if (type == WeightType::Q4_1) std::memcpy(mins + b * 2, &m, 2);
        break;
      }
      default: break;
    }
  }
  return {};
}

}  // namespace kiln
