// ggml's q4_0, q4_1 and q8_0 blocks of a GEMM weight repacked into the
// planes the CUDA kernels read (codegen/kernels/quant_blocks.cuh): the
// quants of all blocks first (4-bit: element e of a row in byte e / 2, the
// low nibble for even e; 8-bit: one byte each), then the blocks' f16 scales,
// then q4_1's f16 minimums. Same values, same bits per weight; eight
// consecutive elements become 4 or 8 consecutive bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/numerics/weight_type.h"
#include "runtime/support/error.h"

namespace kiln {

// Bytes of the packed planes of an [n, k] matrix of `type` (block-quantized).
int64_t packedBlockBytes(WeightType type, int64_t n, int64_t k);

// The [n, k] matrix of `type` blocks at `blocks` (rowBytes(type, k) a row)
// packed into `out`; an error for a type that is not block-quantized or a k
// that is not whole blocks.
Status packBlocks(WeightType type, const uint8_t* blocks, int64_t n, int64_t k, std::vector<uint8_t>& out);

}  // namespace kiln
