// A read-only memory mapping of a whole file. Model files are hundreds of MB
// to tens of GB; mapping lets the kernel page weights in on demand and share
// them between processes instead of copying them into the heap.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "runtime/support/error.h"

namespace kiln::formats {

class MappedFile {
 public:
  // Fails with "<path>: cannot open: <strerror>" and the like. An empty file
  // maps to an empty span.
  static Result<MappedFile> open(const std::string& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  void release();

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kiln::formats
