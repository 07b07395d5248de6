#include "runtime/cuda/executor/sparse24_layout.h"

#include <cstddef>

namespace kiln::cuda {

int64_t sparse24MmaMetadataWords(int64_t n, int64_t k) { return (n + 15) / 16 * (k / 64) * 32; }

std::vector<uint32_t> sparse24MmaMetadata(const uint32_t* canonical, int64_t n, int64_t k) {
  const int64_t words_per_row = k / 32, pairs = k / 64;
  constexpr uint32_t kPaddingRow = 0x44444444u;  // i0 = 0, i1 = 1 in all eight groups
  auto word = [&](int64_t row, int64_t index) { return row < n ? canonical[row * words_per_row + index] : kPaddingRow; };
  std::vector<uint32_t> out(std::size_t(sparse24MmaMetadataWords(n, k)));
  std::size_t at = 0;
  for (int64_t tile = 0; tile < (n + 15) / 16; ++tile)
    for (int64_t pair = 0; pair < pairs; ++pair)
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4, shift = 16 * (t % 2);
        const int64_t index = 2 * pair + t / 2;
        const uint32_t low = (word(16 * tile + g, index) >> shift) & 0xFFFFu;
        const uint32_t high = (word(16 * tile + g + 8, index) >> shift) & 0xFFFFu;
        out[at++] = low | high << 16;
      }
  return out;
}

int64_t sparse24MetadataOffset(int64_t n, int64_t row_bytes) { return (n * row_bytes + 15) / 16 * 16; }

}  // namespace kiln::cuda
