#include "models/formats/int4_linear.h"

#include <cstring>

#include "runtime/numerics/quant.h"
#include "runtime/numerics/weight_type.h"

namespace kiln::formats {
namespace {

uint32_t word(std::span<const uint8_t> bytes, int64_t index) {
  uint32_t w;
  std::memcpy(&w, bytes.data() + index * 4, 4);
  return w;
}

uint16_t half(std::span<const uint8_t> bytes, int64_t index) {
  uint16_t h;
  std::memcpy(&h, bytes.data() + index * 2, 2);
  return h;
}

int nibble(uint32_t w, int j) { return int((w >> (4 * j)) & 0xF); }

std::vector<uint16_t> readScales(std::span<const uint8_t> bytes, int64_t count) {
  std::vector<uint16_t> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out[size_t(i)] = half(bytes, i);
  return out;
}

}  // namespace

bool Int4Linear::groupsAreContiguous(int64_t group_size) const {
  for (int64_t i = 0; i < in_features; ++i)
    if (group_of_column[size_t(i)] != i / group_size) return false;
  return true;
}

float Int4Linear::value(int64_t o, int64_t i) const {
  const size_t g = size_t(group_of_column[size_t(i)]);
  const size_t at = g * size_t(out_features) + size_t(o);
  return f16ToF32(scales[at]) * float(int(codes[size_t(o * in_features + i)]) - int(zeros[at]));
}

Result<Int4Linear> unpackGptq(const PackedInt4Tensors& packed, int64_t in_features,
                              int64_t out_features, int64_t groups, bool zeros_minus_one) {
  Int4Linear layer;
  layer.out_features = out_features;
  layer.in_features = in_features;
  layer.groups = groups;
  layer.codes.resize(size_t(out_features * in_features));
  for (int64_t r = 0; r < in_features / 8; ++r)
    for (int64_t o = 0; o < out_features; ++o) {
      const uint32_t w = word(packed.qweight, r * out_features + o);
      for (int j = 0; j < 8; ++j)
        layer.codes[size_t(o * in_features + 8 * r + j)] = uint8_t(nibble(w, j));
    }
  layer.zeros.resize(size_t(groups * out_features));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < out_features / 8; ++c) {
      uint32_t w = word(packed.qzeros, g * (out_features / 8) + c);
      if (zeros_minus_one) w += 0x11111111u;  // wraps like the tools' int32 arithmetic
      for (int j = 0; j < 8; ++j)
        layer.zeros[size_t(g * out_features + 8 * c + j)] = uint8_t(nibble(w, j));
    }
  layer.scales = readScales(packed.scales, groups * out_features);
  layer.group_of_column.resize(size_t(in_features));
  for (int64_t i = 0; i < in_features; ++i) {
    const int32_t g = int32_t(word(packed.g_idx, i));
    if (g < 0 || g >= groups)
      return makeError("tensor '{}.g_idx': entry {} is {}, expected a group in [0, {})",
                       packed.prefix, i, g, groups);
    layer.group_of_column[size_t(i)] = g;
  }
  return layer;
}

Result<Int4Linear> unpackAwq(const PackedInt4Tensors& packed, int64_t in_features,
                             int64_t out_features, int64_t group_size) {
  Int4Linear layer;
  layer.out_features = out_features;
  layer.in_features = in_features;
  layer.groups = in_features / group_size;
  const int64_t words_per_row = out_features / 8;
  layer.codes.resize(size_t(out_features * in_features));
  for (int64_t i = 0; i < in_features; ++i)
    for (int64_t c = 0; c < words_per_row; ++c) {
      const uint32_t w = word(packed.qweight, i * words_per_row + c);
      for (int j = 0; j < 8; ++j)
        layer.codes[size_t((8 * c + kAwqOrder[j]) * in_features + i)] = uint8_t(nibble(w, j));
    }
  layer.zeros.resize(size_t(layer.groups * out_features));
  for (int64_t g = 0; g < layer.groups; ++g)
    for (int64_t c = 0; c < words_per_row; ++c) {
      const uint32_t w = word(packed.qzeros, g * words_per_row + c);
      for (int j = 0; j < 8; ++j)
        layer.zeros[size_t(g * out_features + 8 * c + kAwqOrder[j])] = uint8_t(nibble(w, j));
    }
  layer.scales = readScales(packed.scales, layer.groups * out_features);
  layer.group_of_column.resize(size_t(in_features));
  for (int64_t i = 0; i < in_features; ++i) layer.group_of_column[size_t(i)] = int32_t(i / group_size);
  return layer;
}

GptqTensors packGptq(const Int4Linear& layer) {
  const int64_t in = layer.in_features, out = layer.out_features;
  GptqTensors t;
  auto put = [](std::vector<uint8_t>& bytes, int64_t index, uint32_t word) {
    std::memcpy(bytes.data() + index * 4, &word, 4);
  };
  t.qweight.resize(size_t(in / 8 * out) * 4);
  for (int64_t r = 0; r < in / 8; ++r)
    for (int64_t o = 0; o < out; ++o) {
      uint32_t w = 0;
      for (int j = 0; j < 8; ++j)
        w |= uint32_t(layer.codes[size_t(o * in + 8 * r + j)] & 0xF) << (4 * j);
      put(t.qweight, r * out + o, w);
    }
  t.qzeros.resize(size_t(layer.groups * out / 8) * 4);
  for (int64_t g = 0; g < layer.groups; ++g)
    for (int64_t c = 0; c < out / 8; ++c) {
      uint32_t w = 0;
      for (int j = 0; j < 8; ++j)
        w |= uint32_t(layer.zeros[size_t(g * out + 8 * c + j)] & 0xF) << (4 * j);
      put(t.qzeros, g * (out / 8) + c, w);
    }
  t.scales.resize(layer.scales.size() * 2);
  std::memcpy(t.scales.data(), layer.scales.data(), t.scales.size());
  t.g_idx.resize(size_t(in) * 4);
  for (int64_t i = 0; i < in; ++i) put(t.g_idx, i, uint32_t(layer.group_of_column[size_t(i)]));
  return t;
}

std::vector<float> dequantizeInt4(const Int4Linear& layer) {
  std::vector<float> out(size_t(layer.out_features * layer.in_features));
  for (int64_t o = 0; o < layer.out_features; ++o)
    for (int64_t i = 0; i < layer.in_features; ++i)
      out[size_t(o * layer.in_features + i)] = layer.value(o, i);
  return out;
}

Result<std::vector<uint8_t>> packInt4For(const Int4Linear& layer, ElementType type,
                                         int64_t group_size, const std::string& prefix) {
  const int64_t in = layer.in_features, out_rows = layer.out_features;
  if (type == ElementType::F32) {
    std::vector<float> values = dequantizeInt4(layer);
    std::vector<uint8_t> bytes(values.size() * 4);
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
  }
  if (type != ElementType::Q4_0 && type != ElementType::Q4_1)
    return makeError("'{}': cannot hold a GPTQ/AWQ weight as {}", prefix, elementTypeName(type));
  if (group_size % kQuantBlock != 0 || in % kQuantBlock != 0 ||
      !layer.groupsAreContiguous(group_size))
    return makeError("'{}': {} blocks need contiguous groups of whole {}-column blocks "
                     "(group_size {}, in_features {}, act-order: {})",
                     prefix, elementTypeName(type), kQuantBlock, group_size, in,
                     layer.groupsAreContiguous(group_size) ? "no" : "yes");
  const int64_t blocks = in / kQuantBlock;
  const bool q4_0 = type == ElementType::Q4_0;
  const size_t block_bytes = q4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ4_1);
  std::vector<uint8_t> bytes(size_t(out_rows * blocks) * block_bytes);
  for (int64_t o = 0; o < out_rows; ++o)
    for (int64_t b = 0; b < blocks; ++b) {
      const size_t at = size_t(layer.group_of_column[size_t(b * kQuantBlock)] * out_rows + o);
      const uint16_t d = layer.scales[at];
      const int zero = layer.zeros[at];
      const uint8_t* q = &layer.codes[size_t(o * in + b * kQuantBlock)];
      uint8_t qs[16];
      for (int i = 0; i < 16; ++i) qs[i] = uint8_t(q[i] | (q[16 + i] << 4));
      uint8_t* dst = bytes.data() + size_t(o * blocks + b) * block_bytes;
      if (q4_0) {
        if (zero != 8)
          return makeError("'{}': zero point of output row {} in group {} is {}; a symmetric "
                           "(sym) GPTQ layer has 8 everywhere",
                           prefix, o, layer.group_of_column[size_t(b * kQuantBlock)], zero);
        BlockQ4_0 block{d, {}};
        std::memcpy(block.qs, qs, 16);
        std::memcpy(dst, &block, sizeof block);
      } else {
        BlockQ4_1 block{d, f32ToF16(-f16ToF32(d) * float(zero)), {}};
        std::memcpy(block.qs, qs, 16);
        std::memcpy(dst, &block, sizeof block);
      }
    }
  return bytes;
}

}  // namespace kiln::formats
