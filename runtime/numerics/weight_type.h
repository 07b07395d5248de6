// Weight element types the weight store binds and the backends read, with
// ggml's block layouts. Activations are always f32 on the CPU; weights may be
// stored as plain rows (f32, f16, bf16), as 32-element quantized blocks
// (q4_0, q4_1, q8_0) or as 256-element K-quant super-blocks (q4_k, q5_k,
// q6_k). The full model-format enum lives in models/formats/tensor_info.h;
// the weight store maps it onto this one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kiln {

enum class WeightType { F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K };

// Elements per quantization block (ggml's QK4_0 = QK4_1 = QK8_0 = 32).
inline constexpr int64_t kQuantBlock = 32;

// ggml block layouts, little-endian, no padding. `d` and `m` are IEEE f16 bits.
struct BlockQ8_0 {
  uint16_t d;      // scale
  int8_t qs[32];   // value = qs[i] * d
};
struct BlockQ4_0 {
  uint16_t d;      // scale
  uint8_t qs[16];  // element i in low nibble of qs[i], element 16+i in high; value = (q-8)*d
};
struct BlockQ4_1 {
  uint16_t d;      // scale
  uint16_t m;      // minimum
  uint8_t qs[16];  // same nibble order as Q4_0; value = q*d + m
};
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);

// Elements per K-quant super-block (ggml's QK_K).
inline constexpr int64_t kSuperBlock = 256;

// K-quant super-blocks: 256 elements in sub-blocks that each carry a small
// integer scale (and for q4_k/q5_k a minimum), themselves scaled by f16 `d`
// (and `dmin`). Sub-block j of q4_k/q5_k covers elements [32j, 32j + 32):
//   value = d * scale[j] * q - dmin * min[j]
// `scales` packs the eight 6-bit scales and eight 6-bit mins in 12 bytes:
//   j < 4:  scale = scales[j] & 63,  min = scales[j + 4] & 63
//   j >= 4: scale = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4,
//           min   = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4
// q4_k: sub-blocks 2i and 2i+1 are the low and high nibbles of
// qs[32i, 32i + 32). q5_k adds a fifth bit: bit j of qh[l] is the high bit of
// element 32j + l.
struct BlockQ4_K {
  uint16_t d;           // super-block scale of the sub-block scales
  uint16_t dmin;        // super-block scale of the sub-block mins
  uint8_t scales[12];   // 6-bit scales and mins, packed as above
  uint8_t qs[128];      // 4-bit quants
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];       // fifth bits
  uint8_t qs[128];      // low 4 bits, as q4_k
};
// q6_k: sixteen sub-blocks of 16 with int8 scales; value = d * scales[e / 16]
// * (q - 32), q in [0, 64). The 256 elements are two halves of 128; in half
// h, element 128h + 32k + l (k < 4, l < 32) has low 4 bits in
// ql[64h + 32(k & 1) + l] (low nibble for k < 2, high for k >= 2) and high 2
// bits at bit 2k of qh[32h + l].
struct BlockQ6_K {
  uint8_t ql[128];      // low 4 bits
  uint8_t qh[64];       // high 2 bits
  int8_t scales[16];    // per 16 elements
  uint16_t d;           // super-block scale
};
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);

// ggml's 32-element blocks (q4_0, q4_1, q8_0).
constexpr bool isBlockQuantized(WeightType type) {
  return type == WeightType::Q4_0 || type == WeightType::Q4_1 || type == WeightType::Q8_0;
}
// ggml's 256-element K-quant super-blocks (q4_k, q5_k, q6_k).
constexpr bool isKQuant(WeightType type) {
  return type == WeightType::Q4_K || type == WeightType::Q5_K || type == WeightType::Q6_K;
}
// Either kind of block: rows are whole blocks, read by the quantized dots.
constexpr bool isQuantized(WeightType type) { return isBlockQuantized(type) || isKQuant(type); }

// Elements per block: 1 for plain types, 32 or 256 for quantized ones. Rows
// of a quantized type must be a multiple of it.
constexpr int64_t quantBlockElements(WeightType type) {
  return isKQuant(type) ? kSuperBlock : isBlockQuantized(type) ? kQuantBlock : 1;
}

// Storage bytes of a row of n elements (n a multiple of
// quantBlockElements(type)).
constexpr int64_t rowBytes(WeightType type, int64_t n) {
  switch (type) {
    case WeightType::F32: return n * 4;
    case WeightType::F16:
    case WeightType::BF16: return n * 2;
    case WeightType::Q4_0: return n / kQuantBlock * int64_t(sizeof(BlockQ4_0));
    case WeightType::Q4_1: return n / kQuantBlock * int64_t(sizeof(BlockQ4_1));
    case WeightType::Q8_0: return n / kQuantBlock * int64_t(sizeof(BlockQ8_0));
    case WeightType::Q4_K: return n / kSuperBlock * int64_t(sizeof(BlockQ4_K));
    case WeightType::Q5_K: return n / kSuperBlock * int64_t(sizeof(BlockQ5_K));
    case WeightType::Q6_K: return n / kSuperBlock * int64_t(sizeof(BlockQ6_K));
  }
  return 0;
}

constexpr std::string_view weightTypeName(WeightType type) {
  switch (type) {
    case WeightType::F32: return "f32";
    case WeightType::F16: return "f16";
    case WeightType::BF16: return "bf16";
    case WeightType::Q4_0: return "q4_0";
    case WeightType::Q4_1: return "q4_1";
    case WeightType::Q8_0: return "q8_0";
    case WeightType::Q4_K: return "q4_k";
    case WeightType::Q5_K: return "q5_k";
    case WeightType::Q6_K: return "q6_k";
  }
  return "?";
}

}  // namespace kiln
