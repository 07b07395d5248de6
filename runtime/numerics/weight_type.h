// Weight element types the weight store binds and the backends read, with
// ggml's block layouts. Activations are always f32 on the CPU; weights may be
// stored as plain rows (f32, f16, bf16) or as 32-element quantized blocks. The
// full model-format enum lives in models/formats/tensor_info.h; the weight
// store maps it onto this one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kiln {

enum class WeightType { F32, F16, BF16, Q4_0, Q4_1, Q8_0 };

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

constexpr bool isBlockQuantized(WeightType type) {
  return type == WeightType::Q4_0 || type == WeightType::Q4_1 || type == WeightType::Q8_0;
}

// Storage bytes of a row of n elements (n a multiple of kQuantBlock for
// quantized types).
constexpr int64_t rowBytes(WeightType type, int64_t n) {
  switch (type) {
    case WeightType::F32: return n * 4;
    case WeightType::F16:
    case WeightType::BF16: return n * 2;
    case WeightType::Q4_0: return n / kQuantBlock * int64_t(sizeof(BlockQ4_0));
    case WeightType::Q4_1: return n / kQuantBlock * int64_t(sizeof(BlockQ4_1));
    case WeightType::Q8_0: return n / kQuantBlock * int64_t(sizeof(BlockQ8_0));
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
  }
  return "?";
}

}  // namespace kiln
