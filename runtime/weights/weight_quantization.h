// Load-time quantization of float weights for kiln's own schemes (the
// `quantize` preparation that xfmr-insert-quantization puts in a manifest).
// The quantized values are written straight into the CPU kernels' block
// layouts, so the quantized-dot GEMM runs them with no new kernel:
//   int8 per channel   ->  q8_0 blocks, every block of a row carries the row's scale
//   int4 per group G   ->  q4_0 blocks (q + 8 in nibbles), G/32 blocks share a scale
//   fp8 e4m3 per channel -> f32 values already rounded through e4m3 and scaled
// The block scale is stored as f16 (the layout's), so a value is q * f16(s).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "models/formats/tensor_info.h"
#include "runtime/support/error.h"

namespace kiln {

struct QuantizedWeight {
  std::unique_ptr<uint8_t[]> packed;  // rows of blocks in `packed_type`
  uint64_t packed_bytes = 0;
  formats::ElementType packed_type = formats::ElementType::F32;
  // The scheme's scales: [rows] per channel, [rows, cols / group] per group.
  std::vector<float> scales;
};

// w: [rows, cols] f32. scheme: "int8" | "int4" | "fp8e4m3"; group: 0 (per
// channel) or the int4 group size (a multiple of 32 dividing cols).
Result<QuantizedWeight> quantizeWeight(std::string_view scheme, int64_t group, const float* w,
                                       int64_t rows, int64_t cols);

// The nearest fp8 e4m3 (finite, max 448) value to x, as a float.
float roundToE4m3(float x);

}  // namespace kiln
