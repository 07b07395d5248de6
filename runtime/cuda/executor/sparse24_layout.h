// The 2:4 sparse GEMM's metadata order (codegen/kernels/sparse24_mma.cuh),
// made once at load from a prepared weight's canonical metadata plane
// (docs/design/sparsity.md). Pure C++: no CUDA types.
//
// mma.sp m16n8k32 with 16-bit operands takes, from two lanes of each quad
// (the sparsity selector picks lanes 0-1 or 2-3), one u32 each: for quad g
// of a 16-row tile, lane 2 sel + h has rows g (bits 0-15) and g + 8 (bits
// 16-31), groups 4h .. 4h + 3 of the 32-column step, one nibble a group in
// the canonical encoding. The GEMM runs two steps (64 columns) a stage with
// selector 0 then 1, so one word per lane serves both:
//
//   mma[tile][pair][4g + t] = half(t % 2) of canonical[16 tile + g][2 pair + t / 2]
//                           | half(t % 2) of canonical[16 tile + g + 8][2 pair + t / 2] << 16
//
// as [ceil(n/16), k/64, 32] u32: a tile's 64 columns are 128 contiguous
// bytes, one cp.async line. Rows past n (to a whole tile) keep columns 0
// and 1 of each group, a valid pattern over zero values.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::cuda {

// Words of the mma-order plane of an [n, k] weight.
int64_t sparse24MmaMetadataWords(int64_t n, int64_t k);

// The mma-order plane from the canonical [n, k/32] one; k % 64 == 0.
std::vector<uint32_t> sparse24MmaMetadata(const uint32_t* canonical, int64_t n, int64_t k);

// Where a prepared weight's metadata plane starts: after n rows of
// row_bytes of kept values, at the next 16-byte boundary.
int64_t sparse24MetadataOffset(int64_t n, int64_t row_bytes);

}  // namespace kiln::cuda
