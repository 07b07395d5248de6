#include "runtime/weights/weight_quantization.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "runtime/numerics/quant.h"
#include "runtime/numerics/weight_type.h"

namespace kiln {
namespace {

constexpr int64_t kBlock = 32;

// Runs row(r) for every r < rows, rows split over the machine's cores (rows
// are independent: a large model's weights quantize in seconds, not minutes).
template <class Row>
void forEachRow(int64_t rows, const Row& row) {
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 32);
  const int64_t chunk = std::max<int64_t>((rows + threads - 1) / threads, 64);
  std::vector<std::thread> workers;
  for (int64_t begin = chunk; begin < rows; begin += chunk)
    workers.emplace_back([&row, begin, end = std::min(rows, begin + chunk)] {
      for (int64_t r = begin; r < end; ++r) row(r);
    });
  for (int64_t r = 0; r < std::min(rows, chunk); ++r) row(r);
  for (std::thread& t : workers) t.join();
}

float absMax(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

int quantizeValue(float x, float inverse_scale, int lo, int hi) {
  return std::clamp(int(std::nearbyint(x * inverse_scale)), lo, hi);
}

QuantizedWeight int8PerChannel(const float* w, int64_t rows, int64_t cols) {
  QuantizedWeight out;
  const int64_t blocks = cols / kBlock;
  out.packed_type = formats::ElementType::Q8_0;
  out.packed_bytes = uint64_t(rows * blocks) * sizeof(BlockQ8_0);
  out.packed = std::make_unique<uint8_t[]>(out.packed_bytes);
  out.scales.resize(size_t(rows));
  auto* dst = reinterpret_cast<BlockQ8_0*>(out.packed.get());
  forEachRow(rows, [&](int64_t r) {
    const float* row = w + r * cols;
    const float scale = absMax(row, cols) / 127.0f;
    const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
    out.scales[size_t(r)] = scale;
    for (int64_t b = 0; b < blocks; ++b) {
      BlockQ8_0& block = dst[r * blocks + b];
      block.d = f32ToF16(scale);
      for (int64_t j = 0; j < kBlock; ++j)
        block.qs[j] = int8_t(quantizeValue(row[b * kBlock + j], inverse, -127, 127));
    }
  });
  return out;
}

QuantizedWeight int4PerGroup(const float* w, int64_t rows, int64_t cols, int64_t group) {
  QuantizedWeight out;
  const int64_t blocks = cols / kBlock, groups = cols / group;
  out.packed_type = formats::ElementType::Q4_0;
  out.packed_bytes = uint64_t(rows * blocks) * sizeof(BlockQ4_0);
  out.packed = std::make_unique<uint8_t[]>(out.packed_bytes);
  out.scales.resize(size_t(rows * groups));
  auto* dst = reinterpret_cast<BlockQ4_0*>(out.packed.get());
  forEachRow(rows, [&](int64_t r) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* values = w + r * cols + g * group;
      // Symmetric: the largest magnitude maps to 7 (the code's range is -8..7).
      const float scale = absMax(values, group) / 7.0f;
      const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
      out.scales[size_t(r * groups + g)] = scale;
      for (int64_t b = 0; b < group / kBlock; ++b) {
        BlockQ4_0& block = dst[r * blocks + g * (group / kBlock) + b];
        block.d = f32ToF16(scale);
        const float* x = values + b * kBlock;
        for (int j = 0; j < 16; ++j) {
          const int lo = quantizeValue(x[j], inverse, -8, 7) + 8;
          const int hi = quantizeValue(x[j + 16], inverse, -8, 7) + 8;
          block.qs[j] = uint8_t(lo | (hi << 4));
        }
      }
    }
  });
  return out;
}

QuantizedWeight fp8PerChannel(const float* w, int64_t rows, int64_t cols) {
  QuantizedWeight out;
  out.packed_type = formats::ElementType::F32;
  out.packed_bytes = uint64_t(rows * cols) * sizeof(float);
  out.packed = std::make_unique<uint8_t[]>(out.packed_bytes);
  out.scales.resize(size_t(rows));
  auto* dst = reinterpret_cast<float*>(out.packed.get());
  forEachRow(rows, [&](int64_t r) {
    const float* row = w + r * cols;
    const float scale = absMax(row, cols) / 448.0f;  // e4m3's largest finite value
    out.scales[size_t(r)] = scale;
    for (int64_t c = 0; c < cols; ++c)
      dst[r * cols + c] = scale > 0 ? roundToE4m3(row[c] / scale) * scale : 0.0f;
  });
  return out;
}

}  // namespace

float roundToE4m3(float x) {
  if (!std::isfinite(x)) return x;
  const float magnitude = std::min(std::fabs(x), 448.0f);
  if (magnitude == 0.0f) return 0.0f;
  // e4m3fn: 3 mantissa bits, exponent bias 7; below 2^-6 the spacing is the
  // subnormal step 2^-9.
  int exponent = std::max(std::ilogb(magnitude), -6);
  const float step = std::ldexp(1.0f, exponent - 3);
  const float rounded = std::min(std::nearbyint(magnitude / step) * step, 448.0f);
  return std::copysign(rounded, x);
}

Result<QuantizedWeight> quantizeWeight(std::string_view scheme, int64_t group, const float* w,
                                       int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0)
    return makeError("quantize: shape [{}, {}] is invalid: expected positive sizes", rows, cols);
  if (scheme == "int8" || scheme == "fp8e4m3") {
    if (group != 0)
      return makeError("quantize: {} is per channel, got group {}: expected 0", scheme, group);
    if (scheme == "fp8e4m3") return fp8PerChannel(w, rows, cols);
    if (cols % kBlock != 0)
      return makeError("quantize: int8 rows of {} elements: expected a multiple of {}", cols,
                       kBlock);
    return int8PerChannel(w, rows, cols);
  }
  if (scheme == "int4") {
    if (group <= 0 || group % kBlock != 0 || cols % group != 0)
      return makeError("quantize: int4 group {} for rows of {} elements: expected a multiple of "
                       "{} that divides the row",
                       group, cols, kBlock);
    return int4PerGroup(w, rows, cols, group);
  }
  return makeError("quantize: scheme '{}' is unknown: expected int8, int4 or fp8e4m3", scheme);
}

}  // namespace kiln
