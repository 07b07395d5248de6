// Reader for GGUF v2/v3 files (llama.cpp's single-file model format).
//
// Layout (all little-endian):
//   magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count x  (string key, u32 value type, value)
//   tensor_count x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type,
//                   u64 offset relative to the data section)
//   padding to general.alignment (default 32) | data section
// Strings are u64 length + bytes (no terminator). Arrays are u32 element
// type + u64 count + elements; arrays may nest.
//
// Every read is bounds-checked, and every count is checked against the bytes
// left in the file before anything is allocated, so a corrupt file yields one
// Error line (file, field, expectation) and never a crash or a huge allocation.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/formats/mapped_file.h"
#include "models/formats/tensor_info.h"
#include "runtime/support/error.h"

namespace kiln::formats {

// GGUF metadata value type ids, as written in the file.
enum class GgufValueType : uint32_t {
  kUInt8 = 0,
  kInt8 = 1,
  kUInt16 = 2,
  kInt16 = 3,
  kUInt32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUInt64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "uint32", "string", "array", ...
std::string_view ggufValueTypeName(GgufValueType type);
// Bytes of one fixed-size scalar in the file; 0 for string and array.
size_t ggufScalarBytes(GgufValueType type);

// One metadata value. Which fields are meaningful depends on `type`.
struct GgufValue {
  GgufValueType type = GgufValueType::kUInt8;

  // Scalars, widened: unsigned types and bool in `uint_value`, signed types in
  // `int_value`, float32/float64 in `float_value`.
  uint64_t uint_value = 0;
  int64_t int_value = 0;
  double float_value = 0;
  std::string string_value;

  // Arrays (type == kArray): `array_size` elements of `array_type`. Scalars
  // stay packed as in the file (array_size * ggufScalarBytes bytes,
  // little-endian), so a 128k-entry score table costs 512 KiB, not 128k
  // objects. Strings go to `array_strings`, nested arrays to `array_values`.
  GgufValueType array_type = GgufValueType::kUInt8;
  uint64_t array_size = 0;
  std::vector<uint8_t> array_bytes;
  std::vector<std::string> array_strings;
  std::vector<GgufValue> array_values;

  // "uint32", "string", "array[int32]", "array[array[string]]".
  std::string typeName() const;
};

class GgufFile {
 public:
  // Maps and parses the file; the mapping lives as long as the GgufFile.
  static Result<GgufFile> open(const std::string& path);
  // Parses bytes already in memory. The buffer is borrowed and must outlive
  // the GgufFile; `name` stands in for the path in error messages.
  static Result<GgufFile> openBuffer(std::span<const uint8_t> bytes,
                                     std::string name);

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile() = default;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  // general.alignment, or 32 when absent.
  uint64_t alignment() const { return alignment_; }
  // Absolute file offset where the tensor data section starts.
  uint64_t dataOffset() const { return data_offset_; }
  uint64_t fileSize() const { return bytes_.size(); }

  // Metadata keys in file order.
  const std::vector<std::string>& metadataKeys() const { return keys_; }
  // The metadata entries as the file holds them (metadataKeys().size() of
  // them, key, type and value each), for a writer that copies them into
  // another GGUF unchanged.
  std::span<const uint8_t> metadataBytes() const {
    return bytes_.subspan(metadata_begin_, metadata_end_ - metadata_begin_);
  }
  // nullptr when the key is absent.
  const GgufValue* find(std::string_view key) const;

  // Typed getters. Each fails with "<file>: metadata '<key>': ..." when the
  // key is absent or its type does not convert. Integers convert between
  // widths when the value fits (a uint32 is fine for getInt).
  Result<uint64_t> getUInt(std::string_view key) const;
  Result<int64_t> getInt(std::string_view key) const;
  Result<double> getFloat(std::string_view key) const;  // float32 or float64
  Result<bool> getBool(std::string_view key) const;
  Result<std::string> getString(std::string_view key) const;
  Result<std::vector<std::string>> getStringArray(std::string_view key) const;
  // array[float32] or array[float64].
  Result<std::vector<float>> getFloatArray(std::string_view key) const;
  // Any integer array whose values fit in int32.
  Result<std::vector<int32_t>> getIntArray(std::string_view key) const;

  // Tensor infos in file order; shapes outermost-first (see TensorInfo).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* findTensor(std::string_view name) const;
  // The tensor's bytes inside the mapping (checked at open to lie in the file).
  std::span<const uint8_t> tensorData(const TensorInfo& tensor) const;

 private:
  GgufFile() = default;
  friend class GgufParser;

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;  // null for openBuffer
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  uint64_t metadata_begin_ = 0, metadata_end_ = 0;  // byte range of the kv entries
  std::vector<std::string> keys_;
  std::map<std::string, GgufValue, std::less<>> values_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace kiln::formats
