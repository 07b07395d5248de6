// Writes small GGUF files for tests: metadata of any GGUF type and tensors of
// any ggml type with caller-given bytes. It can also write deliberately broken
// files (wrong magic or version, raw tensor infos with any type id, offset and
// dims, lying counts) so reader tests can exercise each error path.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "models/formats/gguf_file.h"
#include "models/formats/tensor_info.h"
#include "runtime/support/error.h"

namespace kiln::formats::testing {

// Value builders for GgufWriter::add and for nesting into arrays.
GgufValue ggufUInt8(uint8_t v);
GgufValue ggufInt8(int8_t v);
GgufValue ggufUInt16(uint16_t v);
GgufValue ggufInt16(int16_t v);
GgufValue ggufUInt32(uint32_t v);
GgufValue ggufInt32(int32_t v);
GgufValue ggufUInt64(uint64_t v);
GgufValue ggufInt64(int64_t v);
GgufValue ggufFloat32(float v);
GgufValue ggufFloat64(double v);
GgufValue ggufBool(bool v);
GgufValue ggufString(std::string v);
GgufValue ggufStringArray(std::vector<std::string> v);
GgufValue ggufFloat32Array(const std::vector<float>& v);
GgufValue ggufInt32Array(const std::vector<int32_t>& v);
GgufValue ggufUInt32Array(const std::vector<uint32_t>& v);
// An array of `count` scalars of type `element_type` packed little-endian in
// `bytes` (count * ggufScalarBytes(element_type) bytes).
GgufValue ggufScalarArray(GgufValueType element_type, uint64_t count,
                          std::vector<uint8_t> bytes);
// An array of arrays (each element must itself be an array value).
GgufValue ggufArrayOfArrays(std::vector<GgufValue> elements);

class GgufWriter {
 public:
  GgufWriter& setVersion(uint32_t version);  // default 3
  GgufWriter& setMagic(uint32_t magic);      // default "GGUF"
  // Adds general.alignment (uint32) and pads the data section to it.
  GgufWriter& setAlignment(uint32_t alignment);
  // Write these counts in the header instead of the true ones.
  GgufWriter& overrideTensorCount(uint64_t count);
  GgufWriter& overrideKvCount(uint64_t count);

  GgufWriter& add(std::string key, GgufValue value);
  GgufWriter& addUInt32(std::string key, uint32_t v) { return add(std::move(key), ggufUInt32(v)); }
  GgufWriter& addUInt64(std::string key, uint64_t v) { return add(std::move(key), ggufUInt64(v)); }
  GgufWriter& addInt32(std::string key, int32_t v) { return add(std::move(key), ggufInt32(v)); }
  GgufWriter& addFloat32(std::string key, float v) { return add(std::move(key), ggufFloat32(v)); }
  GgufWriter& addBool(std::string key, bool v) { return add(std::move(key), ggufBool(v)); }
  GgufWriter& addString(std::string key, std::string v) {
    return add(std::move(key), ggufString(std::move(v)));
  }

  // A tensor with its data. `shape` is outermost-first (PyTorch order); the
  // writer reverses it into ggml's ne[]. `data` is written verbatim; it
  // should hold bytesForElements(type, numel) bytes.
  GgufWriter& addTensor(std::string name, std::vector<int64_t> shape, ElementType type,
                        std::vector<uint8_t> data);
  // A tensor of the right size whose bytes are a deterministic pattern.
  GgufWriter& addTensorFilled(std::string name, std::vector<int64_t> shape, ElementType type);
  // A raw tensor info with no data: ne[] innermost-first as in the file, any
  // ggml type id and any offset (relative to the data section).
  GgufWriter& addRawTensorInfo(std::string name, std::vector<uint64_t> ne, uint32_t ggml_type,
                               uint64_t offset);

  // The complete file image.
  std::vector<uint8_t> serialize() const;
  Status writeFile(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t ggml_type = 0;
    std::optional<uint64_t> raw_offset;  // set for raw infos
    std::vector<uint8_t> data;
  };

  uint32_t magic_ = 0x46554747;
  uint32_t version_ = 3;
  uint64_t alignment_ = 32;
  std::optional<uint64_t> tensor_count_override_;
  std::optional<uint64_t> kv_count_override_;
  std::vector<std::pair<std::string, GgufValue>> kvs_;
  std::vector<Tensor> tensors_;
};

// Writes `bytes` to `path`, replacing the file.
Status writeBytes(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace kiln::formats::testing
