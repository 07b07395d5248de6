// How the end-to-end tests compare a row of kiln's logits with a
// reference's: cosine, the largest difference relative to the row's scale,
// and the top token.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>

namespace kiln::e2e {

inline double cosine(std::span<const float> a, std::span<const float> b) {
  double dot = 0, a2 = 0, b2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += double(a[i]) * b[i];
    a2 += double(a[i]) * a[i];
    b2 += double(b[i]) * b[i];
  }
  return dot / std::sqrt(a2 * b2);
}

// Max |a - b| relative to the row's logit scale (max |b|, at least 1).
inline double relativeDiff(std::span<const float> a, std::span<const float> b) {
  double scale = 1.0, diff = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    scale = std::max(scale, double(std::fabs(b[i])));
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
  }
  return diff / scale;
}

inline int argmax(std::span<const float> row) {
  return int(std::max_element(row.begin(), row.end()) - row.begin());
}

}  // namespace kiln::e2e
