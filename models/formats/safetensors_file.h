// Reader for safetensors files and Hugging Face checkpoint directories.
//
// A safetensors file is: u64 little-endian header length N | N bytes of JSON |
// data. The JSON maps tensor names to {"dtype", "shape", "data_offsets":
// [begin, end)} with offsets relative to the data start (8 + N), plus an
// optional "__metadata__" object of string -> string.
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

class SafetensorsFile {
 public:
  // Headers above this are rejected, as the reference implementation does
  // (a corrupt length must not make us read gigabytes of "JSON").
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  static Result<SafetensorsFile> open(const std::string& path, OpenMode mode);
  // Parses bytes already in memory (borrowed; must outlive the result).
  // kHeaderOnly skips the data-in-bounds check, as for files.
  static Result<SafetensorsFile> openBuffer(std::span<const uint8_t> bytes, std::string name,
                                            OpenMode mode);

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile() = default;

  const std::string& path() const { return path_; }
  OpenMode mode() const { return mode_; }
  // 8 + header length: where the data section starts in the file.
  uint64_t dataOffset() const { return data_offset_; }
  // The "__metadata__" entries (e.g. {"format": "pt"}).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Sorted by data offset; TensorInfo::offset is absolute in the file.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* findTensor(std::string_view name) const;
  // Fails in kHeaderOnly mode and for infos not from this file.
  Result<std::span<const uint8_t>> tensorData(const TensorInfo& tensor) const;

 private:
  SafetensorsFile() = default;
  Status parseHeader(std::string_view json, uint64_t data_bytes_available);

  std::string path_;
  OpenMode mode_ = OpenMode::kHeaderOnly;
  std::unique_ptr<MappedFile> mapping_;  // kWithData only
  std::span<const uint8_t> bytes_;       // kWithData only
  uint64_t data_offset_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// A Hugging Face checkpoint directory: either one `model.safetensors` or
// shards listed by `model.safetensors.index.json` ("weight_map": tensor name ->
// shard file name). The index is authoritative: a tensor it names must be in
// its shard.
class SafetensorsCheckpoint {
 public:
  static Result<SafetensorsCheckpoint> open(const std::string& directory, OpenMode mode);

  SafetensorsCheckpoint(SafetensorsCheckpoint&&) noexcept = default;
  SafetensorsCheckpoint& operator=(SafetensorsCheckpoint&&) noexcept = default;

  const std::string& directory() const { return directory_; }
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  // All tensors, shard by shard; TensorInfo::file names the shard.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* findTensor(std::string_view name) const;
  Result<std::span<const uint8_t>> tensorData(const TensorInfo& tensor) const;

 private:
  SafetensorsCheckpoint() = default;

  std::string directory_;
  std::vector<SafetensorsFile> shards_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;  // -> tensors_
  std::map<std::string, size_t, std::less<>> shard_index_;   // file path -> shards_
};

}  // namespace kiln::formats
