#include "models/formats/tensor_info.h"

#include <fmt/format.h>

#include <array>

namespace kiln::formats {
namespace {

struct TypeTraits {
  ElementType type;
  std::string_view name;
  int64_t block_size;   // elements per block
  int64_t block_bytes;  // bytes per block
  int32_t ggml_id;      // -1: ggml has no id for this type
};

// Block geometry from ggml's block_* structs (ggml-common.h). Q8_1 is 36
// bytes there (two halves + 32 int8); the Python `gguf` package's table says
// 40, a leftover from when d and s were floats. We follow the C structs,
// which decide where llama.cpp reads the data.
constexpr std::array<TypeTraits, 42> kTraits = {{
    {ElementType::F32, "F32", 1, 4, 0},
    {ElementType::F16, "F16", 1, 2, 1},
    {ElementType::BF16, "BF16", 1, 2, 30},
    {ElementType::F64, "F64", 1, 8, 28},
    {ElementType::I8, "I8", 1, 1, 24},
    {ElementType::I16, "I16", 1, 2, 25},
    {ElementType::I32, "I32", 1, 4, 26},
    {ElementType::I64, "I64", 1, 8, 27},
    {ElementType::U8, "U8", 1, 1, -1},
    {ElementType::U16, "U16", 1, 2, -1},
    {ElementType::U32, "U32", 1, 4, -1},
    {ElementType::U64, "U64", 1, 8, -1},
    {ElementType::BOOL, "BOOL", 1, 1, -1},
    {ElementType::F8_E4M3, "F8_E4M3", 1, 1, -1},
    {ElementType::F8_E5M2, "F8_E5M2", 1, 1, -1},
    {ElementType::F8_E8M0, "F8_E8M0", 1, 1, -1},
    {ElementType::Q4_0, "Q4_0", 32, 18, 2},
    {ElementType::Q4_1, "Q4_1", 32, 20, 3},
    {ElementType::Q5_0, "Q5_0", 32, 22, 6},
    {ElementType::Q5_1, "Q5_1", 32, 24, 7},
    {ElementType::Q8_0, "Q8_0", 32, 34, 8},
    {ElementType::Q8_1, "Q8_1", 32, 36, 9},
    {ElementType::Q2_K, "Q2_K", 256, 84, 10},
    {ElementType::Q3_K, "Q3_K", 256, 110, 11},
    {ElementType::Q4_K, "Q4_K", 256, 144, 12},
    {ElementType::Q5_K, "Q5_K", 256, 176, 13},
    {ElementType::Q6_K, "Q6_K", 256, 210, 14},
    {ElementType::Q8_K, "Q8_K", 256, 292, 15},
    {ElementType::IQ2_XXS, "IQ2_XXS", 256, 66, 16},
    {ElementType::IQ2_XS, "IQ2_XS", 256, 74, 17},
    {ElementType::IQ3_XXS, "IQ3_XXS", 256, 98, 18},
    {ElementType::IQ1_S, "IQ1_S", 256, 50, 19},
    {ElementType::IQ4_NL, "IQ4_NL", 32, 18, 20},
    {ElementType::IQ3_S, "IQ3_S", 256, 110, 21},
    {ElementType::IQ2_S, "IQ2_S", 256, 82, 22},
    {ElementType::IQ4_XS, "IQ4_XS", 256, 136, 23},
    {ElementType::IQ1_M, "IQ1_M", 256, 56, 29},
    {ElementType::TQ1_0, "TQ1_0", 256, 54, 34},
    {ElementType::TQ2_0, "TQ2_0", 256, 66, 35},
    {ElementType::MXFP4, "MXFP4", 32, 17, 39},
    {ElementType::NVFP4, "NVFP4", 64, 36, 40},
    {ElementType::Q1_0, "Q1_0", 128, 18, 41},
}};

const TypeTraits& traits(ElementType type) {
  // kTraits is not in enum order; the table is small enough to scan.
  for (const TypeTraits& t : kTraits)
    if (t.type == type) return t;
  return kTraits[0];  // unreachable for valid enumerators
}

}  // namespace

std::string_view elementTypeName(ElementType type) { return traits(type).name; }

std::optional<ElementType> parseElementTypeName(std::string_view name) {
  for (const TypeTraits& t : kTraits)
    if (t.name == name) return t.type;
  return std::nullopt;
}

int64_t blockSize(ElementType type) { return traits(type).block_size; }
int64_t blockBytes(ElementType type) { return traits(type).block_bytes; }
bool isQuantized(ElementType type) { return traits(type).block_size > 1; }

Result<uint64_t> bytesForElements(ElementType type, int64_t num_elements) {
  const TypeTraits& t = traits(type);
  if (num_elements < 0)
    return makeError("negative element count {} for {}", num_elements, t.name);
  if (num_elements % t.block_size != 0)
    return makeError("{} elements is not a multiple of the {} block size {}",
                     num_elements, t.name, t.block_size);
  int64_t blocks = num_elements / t.block_size;
  int64_t bytes = 0;
  if (__builtin_mul_overflow(blocks, t.block_bytes, &bytes))
    return makeError("{} elements of {} overflow a 64-bit byte count",
                     num_elements, t.name);
  return static_cast<uint64_t>(bytes);
}

std::optional<ElementType> elementTypeFromGgmlId(uint32_t id) {
  for (const TypeTraits& t : kTraits)
    if (t.ggml_id >= 0 && static_cast<uint32_t>(t.ggml_id) == id) return t.type;
  return std::nullopt;
}

std::optional<uint32_t> ggmlIdFromElementType(ElementType type) {
  const TypeTraits& t = traits(type);
  if (t.ggml_id < 0) return std::nullopt;
  return static_cast<uint32_t>(t.ggml_id);
}

std::optional<int64_t> numElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

std::string shapeToString(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace kiln::formats
