// Element types and the tensor table entry shared by the GGUF and safetensors
// readers. One enum covers every ggml type id a GGUF file can name and every
// safetensors dtype, so the importer and the runtime speak one vocabulary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/support/error.h"

namespace kiln::formats {

// Quantized types store elements in blocks: `blockSize` elements occupy
// `blockBytes` bytes. Plain types have a block size of 1.
enum class ElementType : uint8_t {
  // Plain floating point and integer types.
  F32,
  F16,
  BF16,
  F64,
  I8,
  I16,
  I32,
  I64,
  U8,
  U16,
  U32,
  U64,
  BOOL,
  // 8-bit floats (safetensors only; ggml has no id for them).
  F8_E4M3,
  F8_E5M2,
  F8_E8M0,
  // ggml block-quantized types (GGUF only).
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q8_0,
  Q8_1,
  Q2_K,
  Q3_K,
  Q4_K,
  Q5_K,
  Q6_K,
  Q8_K,
  IQ2_XXS,
  IQ2_XS,
  IQ3_XXS,
  IQ1_S,
  IQ4_NL,
  IQ3_S,
  IQ2_S,
  IQ4_XS,
  IQ1_M,
  TQ1_0,
  TQ2_0,
  MXFP4,
  NVFP4,
  Q1_0,
};

// Canonical upper-case name: "F32", "BF16", "Q4_K", "F8_E4M3", ...
std::string_view elementTypeName(ElementType type);

// Inverse of elementTypeName (case-sensitive). Also accepts the safetensors
// spellings, which coincide with ours except "BOOL".
std::optional<ElementType> parseElementTypeName(std::string_view name);

// Elements per block (1 for plain types, 32 for Q4_0, 256 for the K-quants).
int64_t blockSize(ElementType type);
// Bytes per block (4 for F32, 18 for Q4_0, 144 for Q4_K, ...).
int64_t blockBytes(ElementType type);
bool isQuantized(ElementType type);

// Bytes that `num_elements` elements occupy. Fails if num_elements is negative,
// not a multiple of the block size, or the byte count overflows int64.
Result<uint64_t> bytesForElements(ElementType type, int64_t num_elements);

// ggml type ids as written in GGUF tensor infos. Ids 4, 5 (Q4_2, Q4_3) and
// 31-33, 36-38 (repacked Q4_0/IQ4_NL variants) were removed from ggml and are
// rejected like any unknown id.
std::optional<ElementType> elementTypeFromGgmlId(uint32_t id);
// The ggml id of a type, or nullopt for types ggml lacks (U16, BOOL, F8_*).
std::optional<uint32_t> ggmlIdFromElementType(ElementType type);

// Product of the dims, or nullopt if a dim is negative or the product
// overflows int64. The empty shape (a scalar) has one element.
std::optional<int64_t> numElements(const std::vector<int64_t>& shape);

// "[49152, 576]"
std::string shapeToString(const std::vector<int64_t>& shape);

// How much of a weight file to read. The compiler needs only the tensor
// table (kHeaderOnly accepts a safetensors file that stops after its header,
// e.g. a Llama-3-8B table without 16 GB of data); the runtime needs the data
// (kWithData maps the file and checks every tensor lies inside it).
enum class OpenMode { kHeaderOnly, kWithData };

struct TensorInfo {
  std::string name;
  // Outermost first, PyTorch/HF order: a linear weight is
  // [out_features, in_features]. GGUF stores ne[] innermost-first; the GGUF
  // reader reverses it.
  std::vector<int64_t> shape;
  ElementType type = ElementType::F32;
  // Absolute byte offset of the tensor's data in `file`, so a consumer can
  // mmap the file itself.
  uint64_t offset = 0;
  uint64_t size_bytes = 0;
  // Path of the file holding the data (a shard, for sharded checkpoints).
  std::string file;
};

}  // namespace kiln::formats
