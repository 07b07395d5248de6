#include "models/formats/testing/safetensors_writer.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "models/formats/testing/gguf_writer.h"  // writeBytes

namespace kiln::formats::testing {

SafetensorsWriter& SafetensorsWriter::addMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
  return *this;
}

SafetensorsWriter& SafetensorsWriter::addTensor(std::string name, ElementType type,
                                                std::vector<int64_t> shape,
                                                std::vector<uint8_t> data) {
  Entry e;
  e.name = std::move(name);
  e.dtype = std::string(elementTypeName(type));
  e.shape = std::move(shape);
  e.begin = data_.size();
  e.end = e.begin + data.size();
  data_.insert(data_.end(), data.begin(), data.end());
  entries_.push_back(std::move(e));
  return *this;
}

SafetensorsWriter& SafetensorsWriter::addTensorFilled(std::string name, ElementType type,
                                                      std::vector<int64_t> shape) {
  auto bytes = bytesForElements(type, numElements(shape).value_or(0));
  std::vector<uint8_t> data(bytes.ok() ? *bytes : 0);
  uint8_t seed = static_cast<uint8_t>(entries_.size() * 37 + 11);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(seed + i * 7);
  return addTensor(std::move(name), type, std::move(shape), std::move(data));
}

SafetensorsWriter& SafetensorsWriter::addRawEntry(std::string name, std::string dtype,
                                                  std::vector<int64_t> shape, uint64_t begin,
                                                  uint64_t end) {
  entries_.push_back({std::move(name), std::move(dtype), std::move(shape), begin, end});
  return *this;
}

std::string SafetensorsWriter::headerJson() const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    auto& meta = header["__metadata__"] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata_) meta[k] = v;
  }
  for (const Entry& e : entries_) {
    header[e.name] = {{"dtype", e.dtype},
                      {"shape", e.shape},
                      {"data_offsets", {e.begin, e.end}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

std::vector<uint8_t> SafetensorsWriter::serialize(bool header_only) const {
  std::string header = headerJson();
  return rawSafetensors(header.size(), header, header_only ? std::vector<uint8_t>{} : data_);
}

Status SafetensorsWriter::writeFile(const std::string& path, bool header_only) const {
  std::vector<uint8_t> bytes = serialize(header_only);
  return writeBytes(path, bytes);
}

std::vector<uint8_t> rawSafetensors(uint64_t header_length, const std::string& header,
                                    const std::vector<uint8_t>& data) {
  // Sized up front (GCC 12 misreads an insert after a small vector as out of bounds).
  std::vector<uint8_t> out(8 + header.size() + data.size());
  std::memcpy(out.data(), &header_length, 8);
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + header.size());
  return out;
}

}  // namespace kiln::formats::testing
