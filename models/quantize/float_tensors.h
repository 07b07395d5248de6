// Float values of the tensors a quantizer reads and rewrites: a model's
// tensors (any type the CPU kernels read: f32, f16, bf16, ggml blocks), and
// the plan weights calibration rewrites in place (f32, f16 or bf16).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "models/formats/model_source.h"
#include "runtime/support/error.h"
#include "runtime/weights/weight_store.h"

namespace kiln::quantize {

bool isFloatType(formats::ElementType type);  // f32, f16, bf16

Result<std::vector<float>> readTensorF32(const formats::ModelSource& model, const std::string& name);
// A bound weight's values (f32, f16 or bf16).
Result<std::vector<float>> boundWeightF32(const BoundWeight& weight);
// Writes `values` into a writable weight's bytes, in its type (f32, f16 or
// bf16, rounded to nearest even).
Status storeWeightF32(std::span<uint8_t> bytes, formats::ElementType type,
                      const std::vector<float>& values);

}  // namespace kiln::quantize
