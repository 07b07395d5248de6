#include "models/formats/testing/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kiln::formats::testing {
namespace {

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

void putString(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

GgufValue scalar(GgufValueType type) {
  GgufValue v;
  v.type = type;
  return v;
}

template <typename T>
GgufValue packed(GgufValueType element_type, const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return ggufScalarArray(element_type, values.size(), std::move(bytes));
}

// Writes the value's payload (not its type tag).
void putValue(std::vector<uint8_t>& out, const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::kUInt8: put<uint8_t>(out, v.uint_value); break;
    case GgufValueType::kInt8: put<int8_t>(out, v.int_value); break;
    case GgufValueType::kUInt16: put<uint16_t>(out, v.uint_value); break;
    case GgufValueType::kInt16: put<int16_t>(out, v.int_value); break;
    case GgufValueType::kUInt32: put<uint32_t>(out, v.uint_value); break;
    case GgufValueType::kInt32: put<int32_t>(out, v.int_value); break;
    case GgufValueType::kUInt64: put<uint64_t>(out, v.uint_value); break;
    case GgufValueType::kInt64: put<int64_t>(out, v.int_value); break;
    case GgufValueType::kFloat32: put<float>(out, static_cast<float>(v.float_value)); break;
    case GgufValueType::kFloat64: put<double>(out, v.float_value); break;
    case GgufValueType::kBool: put<uint8_t>(out, v.uint_value != 0); break;
    case GgufValueType::kString: putString(out, v.string_value); break;
    case GgufValueType::kArray:
      put<uint32_t>(out, static_cast<uint32_t>(v.array_type));
      put<uint64_t>(out, v.array_size);
      if (v.array_type == GgufValueType::kString) {
        for (const std::string& s : v.array_strings) putString(out, s);
      } else if (v.array_type == GgufValueType::kArray) {
        for (const GgufValue& e : v.array_values) putValue(out, e);
      } else {
        out.insert(out.end(), v.array_bytes.begin(), v.array_bytes.end());
      }
      break;
  }
}

uint64_t alignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

GgufValue ggufUInt8(uint8_t v) { auto r = scalar(GgufValueType::kUInt8); r.uint_value = v; return r; }
GgufValue ggufInt8(int8_t v) { auto r = scalar(GgufValueType::kInt8); r.int_value = v; return r; }
GgufValue ggufUInt16(uint16_t v) { auto r = scalar(GgufValueType::kUInt16); r.uint_value = v; return r; }
GgufValue ggufInt16(int16_t v) { auto r = scalar(GgufValueType::kInt16); r.int_value = v; return r; }
GgufValue ggufUInt32(uint32_t v) { auto r = scalar(GgufValueType::kUInt32); r.uint_value = v; return r; }
GgufValue ggufInt32(int32_t v) { auto r = scalar(GgufValueType::kInt32); r.int_value = v; return r; }
GgufValue ggufUInt64(uint64_t v) { auto r = scalar(GgufValueType::kUInt64); r.uint_value = v; return r; }
GgufValue ggufInt64(int64_t v) { auto r = scalar(GgufValueType::kInt64); r.int_value = v; return r; }
GgufValue ggufFloat32(float v) { auto r = scalar(GgufValueType::kFloat32); r.float_value = v; return r; }
GgufValue ggufFloat64(double v) { auto r = scalar(GgufValueType::kFloat64); r.float_value = v; return r; }
GgufValue ggufBool(bool v) { auto r = scalar(GgufValueType::kBool); r.uint_value = v; return r; }
GgufValue ggufString(std::string v) {
  auto r = scalar(GgufValueType::kString);
  r.string_value = std::move(v);
  return r;
}

GgufValue ggufStringArray(std::vector<std::string> v) {
  auto r = scalar(GgufValueType::kArray);
  r.array_type = GgufValueType::kString;
  r.array_size = v.size();
  r.array_strings = std::move(v);
  return r;
}

GgufValue ggufFloat32Array(const std::vector<float>& v) {
  return packed(GgufValueType::kFloat32, v);
}
GgufValue ggufInt32Array(const std::vector<int32_t>& v) {
  return packed(GgufValueType::kInt32, v);
}
GgufValue ggufUInt32Array(const std::vector<uint32_t>& v) {
  return packed(GgufValueType::kUInt32, v);
}

GgufValue ggufScalarArray(GgufValueType element_type, uint64_t count,
                          std::vector<uint8_t> bytes) {
  auto r = scalar(GgufValueType::kArray);
  r.array_type = element_type;
  r.array_size = count;
  r.array_bytes = std::move(bytes);
  return r;
}

GgufValue ggufArrayOfArrays(std::vector<GgufValue> elements) {
  auto r = scalar(GgufValueType::kArray);
  r.array_type = GgufValueType::kArray;
  r.array_size = elements.size();
  r.array_values = std::move(elements);
  return r;
}

GgufWriter& GgufWriter::setVersion(uint32_t version) {
  version_ = version;
  return *this;
}

GgufWriter& GgufWriter::setMagic(uint32_t magic) {
  magic_ = magic;
  return *this;
}

GgufWriter& GgufWriter::setAlignment(uint32_t alignment) {
  alignment_ = alignment == 0 ? 1 : alignment;
  return addUInt32("general.alignment", alignment);
}

GgufWriter& GgufWriter::overrideTensorCount(uint64_t count) {
  tensor_count_override_ = count;
  return *this;
}

GgufWriter& GgufWriter::overrideKvCount(uint64_t count) {
  kv_count_override_ = count;
  return *this;
}

GgufWriter& GgufWriter::add(std::string key, GgufValue value) {
  kvs_.emplace_back(std::move(key), std::move(value));
  return *this;
}

GgufWriter& GgufWriter::addTensor(std::string name, std::vector<int64_t> shape,
                                  ElementType type, std::vector<uint8_t> data) {
  Tensor t;
  t.name = std::move(name);
  for (auto it = shape.rbegin(); it != shape.rend(); ++it) t.ne.push_back(*it);
  // Types ggml lacks (U8, BOOL, F8_*) have no id; 0xffffffff makes such a
  // file fail to open rather than silently mislabel the tensor.
  t.ggml_type = ggmlIdFromElementType(type).value_or(0xffffffffu);
  t.data = std::move(data);
  tensors_.push_back(std::move(t));
  return *this;
}

GgufWriter& GgufWriter::addTensorFilled(std::string name, std::vector<int64_t> shape,
                                        ElementType type) {
  int64_t n = numElements(shape).value_or(0);
  auto bytes = bytesForElements(type, n);
  std::vector<uint8_t> data(bytes.ok() ? *bytes : 0);
  // Distinct per-tensor pattern so tests can tell tensors' data apart.
  uint8_t seed = static_cast<uint8_t>(tensors_.size() * 37 + 11);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(seed + i * 7);
  return addTensor(std::move(name), std::move(shape), type, std::move(data));
}

GgufWriter& GgufWriter::addRawTensorInfo(std::string name, std::vector<uint64_t> ne,
                                         uint32_t ggml_type, uint64_t offset) {
  Tensor t;
  t.name = std::move(name);
  t.ne = std::move(ne);
  t.ggml_type = ggml_type;
  t.raw_offset = offset;
  tensors_.push_back(std::move(t));
  return *this;
}

std::vector<uint8_t> GgufWriter::serialize() const {
  std::vector<uint8_t> out;
  put<uint32_t>(out, magic_);
  put<uint32_t>(out, version_);
  put<uint64_t>(out, tensor_count_override_.value_or(tensors_.size()));
  put<uint64_t>(out, kv_count_override_.value_or(kvs_.size()));
  for (const auto& [key, value] : kvs_) {
    putString(out, key);
    put<uint32_t>(out, static_cast<uint32_t>(value.type));
    putValue(out, value);
  }
  // Data offsets are relative to the data section; each tensor starts aligned.
  std::vector<uint64_t> offsets;
  uint64_t data_size = 0;
  for (const Tensor& t : tensors_) {
    if (t.raw_offset) {
      offsets.push_back(*t.raw_offset);
      continue;
    }
    data_size = alignUp(data_size, alignment_);
    offsets.push_back(data_size);
    data_size += t.data.size();
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    putString(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) put<uint64_t>(out, d);
    put<uint32_t>(out, t.ggml_type);
    put<uint64_t>(out, offsets[i]);
  }
  bool has_data = false;
  for (const Tensor& t : tensors_) has_data |= !t.raw_offset;
  if (!has_data) return out;
  uint64_t data_start = alignUp(out.size(), alignment_);
  out.resize(data_start + data_size, 0);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    if (t.raw_offset || t.data.empty()) continue;
    std::memcpy(out.data() + data_start + offsets[i], t.data.data(), t.data.size());
  }
  return out;
}

Status GgufWriter::writeFile(const std::string& path) const {
  std::vector<uint8_t> bytes = serialize();
  return writeBytes(path, bytes);
}

Status writeBytes(const std::string& path, std::span<const uint8_t> bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return makeError("{}: cannot create: {}", path, std::strerror(errno));
  size_t written = bytes.empty() ? 0 : std::fwrite(bytes.data(), 1, bytes.size(), f);
  bool ok = written == bytes.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return makeError("{}: short write of {} bytes", path, bytes.size());
  return Status::success();
}

}  // namespace kiln::formats::testing
