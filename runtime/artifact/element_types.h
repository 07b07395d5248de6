// The element types a plan may name for weights, tables and KV pools: the
// GGUF and safetensors types (lower-case: "f32", "bf16", "q4_1", ...) and
// kiln's own quantization schemes ("int8", "int4", "fp8e4m3").
#pragma once

#include <string_view>

namespace kiln {

bool isPlanElementType(std::string_view name);

}  // namespace kiln
