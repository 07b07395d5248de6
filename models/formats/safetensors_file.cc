#include "models/formats/safetensors_file.h"

#include "models/formats/error_text.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

namespace kiln::formats {
namespace {

using json = nlohmann::json;

// The dtypes the safetensors format defines, in its own spelling.
constexpr std::string_view kDtypes[] = {"BOOL", "U8",  "I8",  "F8_E5M2", "F8_E4M3", "F8_E8M0",
                                        "I16",  "U16", "F16", "BF16",    "I32",     "U32",
                                        "F32",  "F64", "I64", "U64"};

std::optional<ElementType> parseDtype(std::string_view name) {
  for (std::string_view d : kDtypes)
    if (d == name) return parseElementTypeName(name);
  return std::nullopt;
}

// Reads exactly n bytes at `offset`; false on a short read.
bool preadAll(int fd, void* buf, size_t n, uint64_t offset) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

// Checks the length prefix and returns N, the JSON header's length.
Result<uint64_t> checkHeaderLength(const std::string& path, uint64_t file_size,
                                   const uint8_t* prefix) {
  if (file_size < 8)
    return makeError("{}: file is {} bytes, too short for the 8-byte header length", path,
                     file_size);
  uint64_t n;
  std::memcpy(&n, prefix, 8);
  if (n > SafetensorsFile::kMaxHeaderBytes)
    return makeError("{}: header length {} exceeds the {}-byte limit", path, n,
                     SafetensorsFile::kMaxHeaderBytes);
  if (n > file_size - 8)
    return makeError("{}: header length {} exceeds the {} bytes after the 8-byte length field",
                     path, n, file_size - 8);
  if (n < 2)
    return makeError("{}: header length {} is too short for a JSON object", path, n);
  return n;
}

// One-line JSON type name for error messages.
std::string_view jsonTypeName(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "object";
    case json::value_t::array: return "array";
    case json::value_t::string: return "string";
    case json::value_t::boolean: return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    default: return "invalid";
  }
}

Result<uint64_t> nonNegativeInt(const std::string& where, const json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0) return j.get<uint64_t>();
  return makeError("{} is {} {}, expected a non-negative integer", where, jsonTypeName(j),
                   j.dump());
}

}  // namespace

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path, OpenMode mode) {
  SafetensorsFile file;
  file.path_ = path;
  file.mode_ = mode;
  if (mode == OpenMode::kWithData) {
    auto mapping = MappedFile::open(path);
    if (!mapping) return mapping.error();
    file.mapping_ = std::make_unique<MappedFile>(mapping.take());
    file.bytes_ = file.mapping_->bytes();
    auto n = checkHeaderLength(path, file.bytes_.size(), file.bytes_.data());
    if (!n) return n.error();
    std::string_view header(reinterpret_cast<const char*>(file.bytes_.data() + 8), *n);
    KILN_RETURN_IF_ERROR(file.parseHeader(header, file.bytes_.size() - 8 - *n));
    return file;
  }

  // Header only: read the prefix and the JSON, never the data.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return makeError("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return makeError("{}: not a readable regular file", path);
  }
  uint64_t file_size = static_cast<uint64_t>(st.st_size);
  uint8_t prefix[8] = {};
  if (file_size >= 8 && !preadAll(fd, prefix, 8, 0)) {
    ::close(fd);
    return makeError("{}: cannot read the header length", path);
  }
  auto n = checkHeaderLength(path, file_size, prefix);
  if (!n) {
    ::close(fd);
    return n.error();
  }
  std::string header(*n, '\0');
  bool read_ok = preadAll(fd, header.data(), *n, 8);
  ::close(fd);
  if (!read_ok) return makeError("{}: cannot read the {}-byte header", path, *n);
  KILN_RETURN_IF_ERROR(file.parseHeader(header, file_size - 8 - *n));
  return file;
}

Result<SafetensorsFile> SafetensorsFile::openBuffer(std::span<const uint8_t> bytes,
                                                    std::string name, OpenMode mode) {
  SafetensorsFile file;
  file.path_ = std::move(name);
  file.mode_ = mode;
  if (mode == OpenMode::kWithData) file.bytes_ = bytes;
  auto n = checkHeaderLength(file.path_, bytes.size(), bytes.data());
  if (!n) return n.error();
  std::string_view header(reinterpret_cast<const char*>(bytes.data() + 8), *n);
  KILN_RETURN_IF_ERROR(file.parseHeader(header, bytes.size() - 8 - *n));
  return file;
}

Status SafetensorsFile::parseHeader(std::string_view text, uint64_t data_bytes_available) {
  data_offset_ = 8 + text.size();
  json header;
  try {
    header = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return makeError("{}: header is not valid JSON: {}", path_, e.what());
  }
  if (!header.is_object())
    return makeError("{}: header is a JSON {}, expected an object", path_,
                     jsonTypeName(header));

  // The reference writer pads the header with spaces; a NUL byte or any
  // other trailing garbage already failed the parse above.
  try {
    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      const json& entry = it.value();
      if (name == "__metadata__") {
        if (!entry.is_object())
          return makeError("{}: __metadata__ is {}, expected an object of strings", path_,
                           jsonTypeName(entry));
        for (auto m = entry.begin(); m != entry.end(); ++m) {
          if (!m.value().is_string())
            return makeError("{}: __metadata__ '{}' is {}, expected a string", path_,
                             printable(m.key()),
                             jsonTypeName(m.value()));
          metadata_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      std::string where = fmt::format("{}: tensor '{}'", path_, printable(name));
      if (!entry.is_object())
        return makeError("{} is {}, expected an object with dtype, shape, data_offsets", where,
                         jsonTypeName(entry));
      for (const char* field : {"dtype", "shape", "data_offsets"})
        if (!entry.contains(field))
          return makeError("{}: missing field '{}'", where, field);
      const json& dtype = entry["dtype"];
      if (!dtype.is_string())
        return makeError("{}: dtype is {}, expected a string", where, jsonTypeName(dtype));
      auto type = parseDtype(dtype.get<std::string>());
      if (!type)
        return makeError("{}: unknown dtype '{}', expected one of {}", where,
                         printable(dtype.get<std::string>()), fmt::join(kDtypes, ", "));
      const json& shape_json = entry["shape"];
      if (!shape_json.is_array())
        return makeError("{}: shape is {}, expected an array of integers", where,
                         jsonTypeName(shape_json));
      std::vector<int64_t> shape;
      for (size_t d = 0; d < shape_json.size(); ++d) {
        auto dim = nonNegativeInt(fmt::format("{}: shape[{}]", where, d), shape_json[d]);
        if (!dim) return dim.error();
        if (*dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          return makeError("{}: shape[{}] = {} overflows int64", where, d, *dim);
        shape.push_back(static_cast<int64_t>(*dim));
      }
      const json& offsets = entry["data_offsets"];
      if (!offsets.is_array() || offsets.size() != 2)
        return makeError("{}: data_offsets is {}, expected [begin, end]", where, offsets.dump());
      auto begin = nonNegativeInt(where + ": data_offsets[0]", offsets[0]);
      if (!begin) return begin.error();
      auto end = nonNegativeInt(where + ": data_offsets[1]", offsets[1]);
      if (!end) return end.error();
      if (*end < *begin)
        return makeError("{}: data_offsets [{}, {}) end before they begin", where, *begin, *end);

      auto count = numElements(shape);
      if (!count)
        return makeError("{}: element count of shape {} overflows int64", where,
                         shapeToString(shape));
      auto bytes = bytesForElements(*type, *count);
      if (!bytes) return makeError("{}: {}", where, bytes.error().message);
      if (*end - *begin != *bytes)
        return makeError("{}: data_offsets [{}, {}) hold {} bytes, but shape {} of {} needs {}",
                         where, *begin, *end, *end - *begin, shapeToString(shape),
                         elementTypeName(*type), *bytes);
      if (mode_ == OpenMode::kWithData && *end > data_bytes_available)
        return makeError("{}: data [{}, {}) extends past end of file ({} data bytes after the "
                         "header)",
                         where, *begin, *end, data_bytes_available);
      TensorInfo info;
      info.name = name;
      info.shape = std::move(shape);
      info.type = *type;
      info.offset = *begin;  // relative until the overlap check below
      info.size_bytes = *bytes;
      info.file = path_;
      tensors_.push_back(std::move(info));
    }
  } catch (const json::exception& e) {
    // Accessors above are type-checked first; this is a last line of defense.
    return makeError("{}: malformed header: {}", path_, e.what());
  }

  std::sort(tensors_.begin(), tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) {
              return a.offset != b.offset ? a.offset < b.offset : a.name < b.name;
            });
  for (size_t i = 1; i < tensors_.size(); ++i) {
    const TensorInfo& a = tensors_[i - 1];
    const TensorInfo& b = tensors_[i];
    if (a.offset + a.size_bytes > b.offset)
      return makeError("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", path_,
                       printable(a.name), a.offset, a.offset + a.size_bytes, printable(b.name),
                       b.offset, b.offset + b.size_bytes);
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    // Relative offsets are bounded by the header's integers (< 2^64) and the
    // data section; the sum cannot wrap for any offset the checks accepted.
    if (tensors_[i].offset > std::numeric_limits<uint64_t>::max() - data_offset_)
      return makeError("{}: tensor '{}': data offset {} overflows", path_,
                       printable(tensors_[i].name),
                       tensors_[i].offset);
    tensors_[i].offset += data_offset_;
    tensor_index_.emplace(tensors_[i].name, i);
  }
  return Status::success();
}

const TensorInfo* SafetensorsFile::findTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<std::span<const uint8_t>> SafetensorsFile::tensorData(const TensorInfo& tensor) const {
  if (mode_ != OpenMode::kWithData)
    return makeError("{}: tensor '{}': data requested from a file opened header-only", path_,
                     tensor.name);
  if (tensor.offset > bytes_.size() || tensor.size_bytes > bytes_.size() - tensor.offset)
    return makeError("{}: tensor '{}': data [{}, {}) is not inside this file ({} bytes)", path_,
                     tensor.name, tensor.offset, tensor.offset + tensor.size_bytes,
                     bytes_.size());
  return bytes_.subspan(tensor.offset, tensor.size_bytes);
}

//===----------------------------------------------------------------------===//
// SafetensorsCheckpoint
//===----------------------------------------------------------------------===//

namespace {

Result<std::string> readTextFile(const std::string& path) {
  auto mapping = MappedFile::open(path);
  if (!mapping) return mapping.error();
  auto bytes = mapping->bytes();
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

}  // namespace

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::open(const std::string& directory,
                                                          OpenMode mode) {
  namespace fs = std::filesystem;
  SafetensorsCheckpoint ckpt;
  ckpt.directory_ = directory;
  std::error_code ec;
  const std::string single = (fs::path(directory) / "model.safetensors").string();
  const std::string index_path = (fs::path(directory) / "model.safetensors.index.json").string();

  if (!fs::exists(index_path, ec)) {
    if (!fs::exists(single, ec))
      return makeError("{}: no model.safetensors or model.safetensors.index.json", directory);
    auto file = SafetensorsFile::open(single, mode);
    if (!file) return file.error();
    ckpt.tensors_ = file->tensors();
    ckpt.shard_index_.emplace(single, 0);
    ckpt.shards_.push_back(file.take());
  } else {
    auto text = readTextFile(index_path);
    if (!text) return text.error();
    // Shard file name -> tensor names the index assigns to it, in index order.
    std::vector<std::pair<std::string, std::vector<std::string>>> plan;
    try {
      json index = json::parse(*text);
      if (!index.is_object() || !index.contains("weight_map") ||
          !index["weight_map"].is_object())
        return makeError("{}: missing 'weight_map' object", index_path);
      std::map<std::string, size_t> plan_slot;
      for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
        if (!it.value().is_string())
          return makeError("{}: weight_map '{}' is {}, expected a shard file name", index_path,
                           printable(it.key()), jsonTypeName(it.value()));
        std::string shard = it.value().get<std::string>();
        // Shards live beside the index; a path could escape the checkpoint.
        if (shard.empty() || shard.find('/') != std::string::npos || shard == "." ||
            shard == "..")
          return makeError("{}: weight_map '{}' names '{}', expected a file name in the same "
                           "directory",
                           index_path, printable(it.key()), printable(shard));
        auto [slot, inserted] = plan_slot.emplace(shard, plan.size());
        if (inserted) plan.emplace_back(shard, std::vector<std::string>{});
        plan[slot->second].second.push_back(it.key());
      }
    } catch (const json::exception& e) {
      return makeError("{}: not valid JSON: {}", index_path, e.what());
    }
    std::sort(plan.begin(), plan.end());  // shard order: model-00001, model-00002, ...
    for (const auto& [shard, names] : plan) {
      std::string shard_path = (fs::path(directory) / shard).string();
      if (!fs::exists(shard_path, ec))
        return makeError("{}: shard '{}' (holding '{}' and {} more tensors) is missing",
                         index_path, printable(shard), printable(names.front()), names.size() - 1);
      auto file = SafetensorsFile::open(shard_path, mode);
      if (!file) return file.error();
      for (const std::string& name : names) {
        const TensorInfo* t = file->findTensor(name);
        if (t == nullptr)
          return makeError("{}: tensor '{}' is mapped to '{}', but that shard has no such tensor",
                           index_path, printable(name), printable(shard));
        ckpt.tensors_.push_back(*t);
      }
      ckpt.shard_index_.emplace(shard_path, ckpt.shards_.size());
      ckpt.shards_.push_back(file.take());
    }
  }
  for (size_t i = 0; i < ckpt.tensors_.size(); ++i)
    ckpt.tensor_index_.emplace(ckpt.tensors_[i].name, i);
  return ckpt;
}

const TensorInfo* SafetensorsCheckpoint::findTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<std::span<const uint8_t>> SafetensorsCheckpoint::tensorData(
    const TensorInfo& tensor) const {
  auto it = shard_index_.find(tensor.file);
  if (it == shard_index_.end())
    return makeError("{}: tensor '{}' names file '{}', which is not a shard of this checkpoint",
                     directory_, tensor.name, tensor.file);
  return shards_[it->second].tensorData(tensor);
}

}  // namespace kiln::formats
