#include "runtime/artifact/element_types.h"

#include <cctype>
#include <string>

#include "models/formats/tensor_info.h"

namespace kiln {

bool isPlanElementType(std::string_view name) {
  // xfmr-insert-quantization's schemes, beside the GGUF/safetensors types.
  if (name == "int8" || name == "int4" || name == "fp8e4m3") return true;
  // 2:4 sparse (xfmr-sparsify): float, int8 or int4 kept values.
  if (name == "sp24" || name == "int8sp24" || name == "int4sp24") return true;
  std::string upper(name);
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  return formats::parseElementTypeName(upper).has_value();
}

}  // namespace kiln
