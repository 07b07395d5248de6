// FNV-1a 64: the checksum of kiln's cache entries and the sampled content
// hash of model files. A check against accidents (torn writes, bit rot,
// a file swapped under an artifact), not a security boundary.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/support/error.h"

namespace kiln {

class Fnv1a64 {
 public:
  void add(std::string_view bytes) {
    for (unsigned char c : bytes) state_ = (state_ ^ c) * 0x100000001b3ull;
  }
  void addU64(uint64_t value) {  // little-endian, whatever the host
    for (int i = 0; i < 8; ++i) {
      state_ = (state_ ^ ((value >> (8 * i)) & 0xff)) * 0x100000001b3ull;
    }
  }
  uint64_t value() const { return state_; }
  // 16 hex digits.
  std::string hex() const;

 private:
  uint64_t state_ = 0xcbf29ce484222325ull;
};

inline uint64_t fnv1a64(std::string_view bytes) {
  Fnv1a64 h;
  h.add(bytes);
  return h.value();
}

// The sampled content hash of a model file, 16 hex digits: FNV-1a 64 over
// the file's size and its bytes, all of them for a file up to
// kSampledWholeBytes, else its first and last MiB and kSampledBlocks blocks
// of 64 KiB spread evenly between (about 6 MiB read whatever the size).
// Hashing every byte of a multi-GB checkpoint at each load would take
// seconds to minutes; the sample reads the headers (tensor tables, offsets)
// whole and catches a file replaced by another of the same size and mtime,
// though not an edit confined to the bytes between samples.
inline constexpr uint64_t kSampledWholeBytes = 8ull << 20;
inline constexpr int kSampledBlocks = 64;
Result<std::string> sampledContentHash(const std::string& path);

}  // namespace kiln
