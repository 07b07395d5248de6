// 2:4 structured sparsity of a weight matrix (docs/design/sparsity.md): in
// every group of four consecutive input columns of a row two values are
// kept, with a 4-bit index pair per group. The compression the `sparsify`
// load-time preparation runs, the packing the weight store binds, and the
// expansion the kernels' tests compare with.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "models/formats/tensor_info.h"
#include "runtime/numerics/sparse24_layout.h"
#include "runtime/support/error.h"

namespace kiln {

struct Sparse24Matrix {
  int64_t rows = 0, cols = 0;    // the dense shape
  std::vector<float> values;     // [rows, cols / 2], group g's kept values at 2g, 2g + 1
  std::vector<uint32_t> meta;    // [rows, cols / 32]; group g: bits 4 (g % 8).. of word g / 8, i0 | i1 << 2
};

// w: [rows, cols] f32, cols a multiple of 64. method "magnitude" keeps the
// two largest |w| of each group (ties to the lower column); "sparsegpt"
// takes a weight pruned before the compile and fails, naming the row and
// the columns, if a group holds more than two nonzeros. `name` is the
// weight's, for that message.
Result<Sparse24Matrix> compressSparse24(const float* w, int64_t rows, int64_t cols, std::string_view method,
                                        std::string_view name);

// The dense matrix again, zeros where values were dropped.
std::vector<float> expandSparse24(const Sparse24Matrix& m);

// A bound 2:4 weight: the values plane in `values_type` (f32, or the q8_0 /
// q4_0 blocks of int8sp24 / int4sp24) then the metadata plane.
struct PackedSparse24 {
  std::unique_ptr<uint8_t[]> data;
  uint64_t bytes = 0;
  uint64_t meta_offset = 0;
  formats::ElementType values_type = formats::ElementType::F32;
  std::vector<float> scales;  // int8sp24: [rows]; int4sp24: [rows, cols / group]
};

// scheme: "sp24" (f32 values), "int8sp24" (per row) or "int4sp24" (group:
// input columns per scale, a multiple of 64 dividing cols), quantizing the
// kept values as the dense int8/int4 schemes quantize a row
// (weight_quantization.h).
Result<PackedSparse24> packSparse24(const Sparse24Matrix& m, std::string_view scheme, int64_t group);

}  // namespace kiln
