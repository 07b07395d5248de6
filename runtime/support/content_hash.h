// FNV-1a 64: the checksum of kiln's cache entries and the sampled content
// hash of model files. A check against accidents (torn writes, bit rot,
// a file swapped under an artifact), not a security boundary.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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

}  // namespace kiln
