// One linear layer of a GPTQ or AWQ checkpoint, unpacked from the tools'
// int32 packing into plain integers, and its conversion into the weight
// layouts the backends run.
//
// A weight element is  value[o, i] = scale[g, o] * (q[o, i] - zero[g, o])
// with g = group_of_column[i]: per (group, output row) an f16 scale and a
// 4-bit integer zero point. Layouts as the tools write them (checked against
// GPTQModel 7.7.0's TorchQuantLinear and AutoAWQ 0.2.9's WQLinear_GEMM):
//   GPTQ  qweight [in/8, out]    int32; nibble j of word [r, o] is q[o, 8r + j]
//         qzeros  [groups, out/8] int32; nibble j of word [g, c] is zero[g, 8c + j]
//         scales  [groups, out]  f16
//         g_idx   [in]           int32, the group of each input column; with
//                                act-order (desc_act) it is not sorted
//   AWQ   qweight [in, out/8]    int32; nibble j of word [i, c] is
//                                q[8c + kAwqOrder[j], i]
//         qzeros  [groups, out/8] int32, same interleave along out
//         scales  [groups, out]  f16; group of column i is i / group_size
// GPTQ's original ("v1", checkpoint_format "gptq") format stores each zero
// minus one, subtracted from the whole packed word (0x11111111), so a zero of
// 0 borrows from its neighbour; adding the word back recovers every zero,
// which is what GPTQModel does on load. "gptq_v2" stores zeros as they are.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "models/formats/tensor_info.h"
#include "runtime/support/error.h"

namespace kiln::formats {

// AWQ's GEMM packing: the j-th nibble of a word holds column kAwqOrder[j] of
// its eight.
inline constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

struct Int4Linear {
  int64_t out_features = 0;
  int64_t in_features = 0;
  int64_t groups = 0;
  std::vector<uint8_t> codes;             // [out, in], 0..15
  std::vector<uint8_t> zeros;             // [groups, out], 0..15
  std::vector<uint16_t> scales;           // [groups, out], f16 bits
  std::vector<int32_t> group_of_column;   // [in], each in [0, groups)

  // True when column i is in group i / group_size for every i (no act-order).
  bool groupsAreContiguous(int64_t group_size) const;
  // value[o, i] exactly: an f16 scale times an integer in [-15, 15] needs at
  // most 15 significant bits, so f32 holds it without rounding.
  float value(int64_t o, int64_t i) const;
};

// The packed tensors of one linear layer, as raw little-endian bytes with
// their checkpoint names (for errors) and shapes already checked.
struct PackedInt4Tensors {
  std::string prefix;  // e.g. "model.layers.0.self_attn.q_proj"
  std::span<const uint8_t> qweight, qzeros, scales, g_idx;  // g_idx: GPTQ only
};

// Unpacks a GPTQ layer. `zeros_minus_one`: the v1 checkpoint format.
// Fails, naming the tensor, when a g_idx entry is outside [0, groups).
Result<Int4Linear> unpackGptq(const PackedInt4Tensors& packed, int64_t in_features,
                              int64_t out_features, int64_t groups, bool zeros_minus_one);
// Unpacks an AWQ GEMM layer (groups = in / group_size).
Result<Int4Linear> unpackAwq(const PackedInt4Tensors& packed, int64_t in_features,
                             int64_t out_features, int64_t group_size);

// The GPTQ tensors of a layer (the inverse of unpackGptq): qweight [in/8,
// out] and qzeros [groups, out/8] int32, scales [groups, out] f16, g_idx
// [in] int32, little-endian bytes. Zeros are written as they are
// (checkpoint_format "gptq_v2"). in and out must be multiples of 8.
struct GptqTensors {
  std::vector<uint8_t> qweight, qzeros, scales, g_idx;
};
GptqTensors packGptq(const Int4Linear& layer);

// The whole weight as f32 [out, in], exactly (see Int4Linear::value).
std::vector<float> dequantizeInt4(const Int4Linear& layer);

// The weight in a layout the backends run, [out, in] rows:
//   F32   every value, exact; any grouping, act-order included.
//   Q4_0  d = scale, q as stored: exact, but only when every zero is 8 (GPTQ
//         sym) and groups are whole, contiguous 32-column blocks.
//   Q4_1  d = scale, m = -scale * zero rounded to f16: q * d exact, m within
//         half an f16 ulp of scale * zero (at most 15 * scale * 2^-11 per
//         element); needs contiguous groups of whole 32-column blocks.
// `group_size` is the contiguous group width (in_features when per channel).
// Fails, naming `prefix`, when the layer does not fit the layout.
Result<std::vector<uint8_t>> packInt4For(const Int4Linear& layer, ElementType type,
                                         int64_t group_size, const std::string& prefix);

}  // namespace kiln::formats
