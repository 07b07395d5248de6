// What a bound 2:4 sparse weight (BoundWeight::sparse24; the weight store
// holds its kept values [n, k/2] in f32, q8_0 or q4_0 blocks, then the
// canonical metadata [n, k/32] u32 at an unaligned offset) becomes on the
// device, built on the host (weight_forms.h uploads it):
//   - the gemv's image (sparse24_gemv.cuh): the kept values as the kernel
//     reads them (f32 ones converted to bf16, q8_0 / q4_0 blocks as they
//     are, their scales folded in), then the canonical metadata from the
//     next 16-byte boundary (sparse24MetadataOffset);
//   - the sparse GEMM's planes: the metadata in mma order
//     (sparse24_layout.h) and, for q8_0 / q4_0 values, the kept values
//     dequantized to bf16 (the GEMMs read bf16; sp24's read the gemv's);
//   - the dense matrix [n, k], zeros where values were dropped, for plans
//     whose sparse gemms run on cuBLASLt (kernel_selection.h's
//     sparse24RunsDense).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/support/error.h"
#include "runtime/weights/weight_store.h"

namespace kiln::cuda {

// Bytes of one row of kept values in the gemv's image: k bf16 bytes, or
// k/64 q8_0 / q4_0 blocks.
int64_t sparse24GemvRowBytes(const BoundWeight& w);

// The gemv's image and its size; where its metadata starts is
// sparse24MetadataOffset(n, sparse24GemvRowBytes(w)).
int64_t sparse24GemvImageBytes(const BoundWeight& w);
Result<std::vector<uint8_t>> sparse24GemvImage(const BoundWeight& w);

// The mma-order metadata plane, as bytes (sparse24MmaMetadataWords words).
std::vector<uint8_t> sparse24MmaImage(const BoundWeight& w);

// The kept values [n, k/2] as f32 (dequantized from their blocks).
Result<std::vector<float>> sparse24KeptValues(const BoundWeight& w);

// The dense matrix [n, k] as f32.
Result<std::vector<float>> sparse24Dense(const BoundWeight& w);

}  // namespace kiln::cuda
