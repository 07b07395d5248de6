// ggml's q4_0, q4_1 and q8_0 blocks of a GEMM weight repacked into the
// tensor-core tiles the CUDA kernels read (codegen/kernels/quant_blocks.cuh
// documents the layout; its host-visible QuantTiles and quant_slot are the
// one definition both sides use): the quants in mma fragment order, then
// one f16 scale per `group` columns of each row, then q4_1's f16 minimums.
// Same values, same bits per weight (group 32); a larger group whose
// blocks all carry the same scale (kiln's int4 with groups of 64 or 128,
// int8 per channel) keeps one copy of it.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/numerics/weight_type.h"
#include "runtime/support/error.h"

namespace kiln {

// Bytes of the tiles of an [n, k] matrix of `type` (block-quantized) with
// one scale per `group` columns.
int64_t packedBlockBytes(WeightType type, int64_t n, int64_t k, int64_t group = kQuantBlock);

// The [n, k] matrix of `type` blocks at `blocks` (rowBytes(type, k) a row)
// packed into `out`. Errors: a type that is not block-quantized, a k that
// is not whole blocks, a group that is not 32 or a multiple of 64 dividing
// k, or blocks of one group whose scales (or minimums) differ.
Status packBlocks(WeightType type, const uint8_t* blocks, int64_t n, int64_t k, int64_t group,
                  std::vector<uint8_t>& out);

}  // namespace kiln
