// Block-quantized GEMM weights repacked into the tensor-core tiles the CUDA
// kernels read (codegen/kernels/quant_blocks.cuh documents the layout; its
// host-visible QuantTiles and quant_slot are the one definition both sides
// use): the quants in mma fragment order, then one f16 scale per `group`
// columns of each row, then the f16 minimums of the types that have them.
//
//   q4_0, q4_1, q8_0  ggml's 32-element blocks: same values, same bits
//                     per weight (a larger group whose blocks all carry one
//                     scale, as kiln's int4 with groups of 64 or 128 and
//                     int8 per channel make them, keeps one copy of it);
//   q4_k, q5_k        4-bit (5-bit in an 8-bit tile) with a scale and min
//                     per 32 columns: d·scale[j] and -dmin·min[j] rounded to
//                     f16 (a relative 2^-11 of the sub-block's scale);
//   q6_k              6-bit in an 8-bit tile, (q - 32) with the scale
//                     d·scale[j] per 16 columns rounded to f16.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/numerics/weight_type.h"
#include "runtime/support/error.h"

namespace kiln {

// Whether `type` has a tile form (the CUDA kernels' packed weights).
constexpr bool hasQuantTiles(WeightType type) { return isBlockQuantized(type) || isKQuant(type); }

// The columns one scale covers in the tiles of `type` unless a larger
// shared-scale group is asked for: 16 for q6_k, 32 otherwise.
constexpr int64_t quantTileGroup(WeightType type) { return type == WeightType::Q6_K ? 16 : kQuantBlock; }

// Bytes of the tiles of an [n, k] matrix of `type` with one scale per
// `group` columns (0: quantTileGroup(type)).
int64_t packedBlockBytes(WeightType type, int64_t n, int64_t k, int64_t group = 0);

// The [n, k] matrix of `type` blocks at `blocks` (rowBytes(type, k) a row)
// packed into `out` (group 0: quantTileGroup(type)). Errors: a type without
// tiles, a k that is not whole blocks, a group that is not the type's
// sub-block or a multiple of 64 dividing k, or blocks of one group whose
// scales (or minimums) differ.
Status packBlocks(WeightType type, const uint8_t* blocks, int64_t n, int64_t k, int64_t group,
                  std::vector<uint8_t>& out);

}  // namespace kiln
