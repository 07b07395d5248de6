#include "models/quantize/float_tensors.h"

#include <cstring>
#include <optional>

#include "runtime/numerics/quant.h"

namespace kiln::quantize {
namespace {

using formats::ElementType;

std::optional<WeightType> kernelType(ElementType type) {
  switch (type) {
    case ElementType::F32: return WeightType::F32;
    case ElementType::F16: return WeightType::F16;
    case ElementType::BF16: return WeightType::BF16;
    case ElementType::Q4_0: return WeightType::Q4_0;
    case ElementType::Q4_1: return WeightType::Q4_1;
    case ElementType::Q8_0: return WeightType::Q8_0;
    case ElementType::Q4_K: return WeightType::Q4_K;
    case ElementType::Q5_K: return WeightType::Q5_K;
    case ElementType::Q6_K: return WeightType::Q6_K;
    default: return std::nullopt;
  }
}

Result<std::vector<float>> decode(ElementType type, std::span<const uint8_t> bytes, int64_t count,
                                  const std::string& name) {
  auto kernel = kernelType(type);
  if (!kernel)
    return makeError("tensor '{}' is {}, which kiln cannot read as floats", name,
                     formats::elementTypeName(type));
  std::vector<float> out(static_cast<size_t>(count));
  KILN_RETURN_IF_ERROR(dequantizeRow(*kernel, bytes.data(), out.data(), count));
  return out;
}

}  // namespace

bool isFloatType(ElementType type) {
  return type == ElementType::F32 || type == ElementType::F16 || type == ElementType::BF16;
}

Result<std::vector<float>> readTensorF32(const formats::ModelSource& model, const std::string& name) {
  const formats::TensorInfo* t = model.findTensor(name);
  if (!t) return makeError("{}: no tensor '{}'", model.path(), name);
  auto bytes = model.tensorData(*t);
  if (!bytes.ok()) return bytes.error();
  return decode(t->type, *bytes, *formats::numElements(t->shape), name);
}

Result<std::vector<float>> boundWeightF32(const BoundWeight& weight) {
  return decode(weight.format_type, {weight.data, weight.size_bytes},
                *formats::numElements(weight.shape), weight.name);
}

Status storeWeightF32(std::span<uint8_t> bytes, ElementType type, const std::vector<float>& values) {
  const size_t n = values.size();
  if (type == ElementType::F32 && bytes.size() == n * 4) {
    std::memcpy(bytes.data(), values.data(), n * 4);
    return {};
  }
  if ((type == ElementType::F16 || type == ElementType::BF16) && bytes.size() == n * 2) {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = type == ElementType::F16 ? f32ToF16(values[i]) : f32ToBf16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
    return {};
  }
  return makeError("cannot store {} floats as {} in {} bytes", n, formats::elementTypeName(type),
                   bytes.size());
}

}  // namespace kiln::quantize
