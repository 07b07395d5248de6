// Writes small safetensors files for tests: tensors of any dtype with given
// bytes (or header-only entries whose data is left out), __metadata__, and
// raw header JSON for broken-file tests.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/formats/tensor_info.h"
#include "runtime/support/error.h"

namespace kiln::formats::testing {

class SafetensorsWriter {
 public:
  SafetensorsWriter& addMetadata(std::string key, std::string value);
  // `shape` outermost-first; `data` written verbatim at the next offset.
  SafetensorsWriter& addTensor(std::string name, ElementType type, std::vector<int64_t> shape,
                               std::vector<uint8_t> data);
  // Right-sized deterministic bytes.
  SafetensorsWriter& addTensorFilled(std::string name, ElementType type,
                                     std::vector<int64_t> shape);
  // An entry whose data_offsets are given as is (any dtype string, any
  // offsets), for broken-file tests. Contributes no data bytes.
  SafetensorsWriter& addRawEntry(std::string name, std::string dtype, std::vector<int64_t> shape,
                                 uint64_t begin, uint64_t end);

  // The header JSON, padded with spaces to a multiple of 8 bytes as the
  // reference writer does.
  std::string headerJson() const;
  // Length prefix + header, then the data unless `header_only`.
  std::vector<uint8_t> serialize(bool header_only = false) const;
  Status writeFile(const std::string& path, bool header_only = false) const;

 private:
  struct Entry {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;
  };
  std::map<std::string, std::string> metadata_;
  std::vector<Entry> entries_;
  std::vector<uint8_t> data_;
};

// A safetensors image from raw parts: the length prefix (any value) followed
// by `header` and `data` verbatim.
std::vector<uint8_t> rawSafetensors(uint64_t header_length, const std::string& header,
                                    const std::vector<uint8_t>& data = {});

}  // namespace kiln::formats::testing
