// The 2:4 structured-sparse weight layout (docs/design/sparsity.md), shared
// by the weight store that packs it and the kernels that read it. For W
// [n, k], k a multiple of 64: the kept values [n, k/2] (group g of four
// columns keeps columns 4g + i0 and 4g + i1, i0 < i1, at 2g and 2g + 1), then
// the metadata [n, k/32] uint32, group g's nibble i0 | i1 << 2 at bits
// 4 (g % 8) of word g / 8.
#pragma once

#include <cstdint>

namespace kiln {

// Input columns a metadata word covers (eight 4-column groups).
inline constexpr int64_t kSparse24WordColumns = 32;
// Input columns the layout needs whole: one 32-value block of kept values.
inline constexpr int64_t kSparse24Span = 64;

// The kept columns of group g of a row: i0, i1 (i0 < i1).
inline void sparse24Pair(const uint32_t* row_meta, int64_t group, int& i0, int& i1) {
  const uint32_t nibble = (row_meta[group / 8] >> (4 * (group % 8))) & 0xF;
  i0 = int(nibble & 3);
  i1 = int(nibble >> 2);
}

}  // namespace kiln
