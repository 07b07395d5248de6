#include "runtime/cpu/kernels/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/cpu/kernels/elementwise.h"
#include "runtime/cpu/kernels/linear.h"

namespace kiln::cpu {

void moeRoute(const float* logits, int64_t rows, int64_t experts, int64_t top_k, bool normalize,
              float* weights, int32_t* ids) {
  std::vector<float> probs(static_cast<size_t>(experts));
  std::vector<int32_t> order(static_cast<size_t>(experts));
  for (int64_t t = 0; t < rows; ++t) {
    const float* row = logits + t * experts;
    const float peak = *std::max_element(row, row + experts);
    float sum = 0;
    for (int64_t e = 0; e < experts; ++e) sum += probs[size_t(e)] = std::exp(row[e] - peak);
    for (int64_t e = 0; e < experts; ++e) probs[size_t(e)] /= sum;
    for (int64_t e = 0; e < experts; ++e) order[size_t(e)] = int32_t(e);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
      return probs[size_t(a)] > probs[size_t(b)] || (probs[size_t(a)] == probs[size_t(b)] && a < b);
    });
    float kept = 0;
    for (int64_t k = 0; k < top_k; ++k) kept += probs[size_t(order[size_t(k)])];
    for (int64_t k = 0; k < top_k; ++k) {
      const int32_t e = order[size_t(k)];
      weights[t * top_k + k] = normalize ? probs[size_t(e)] / kept : probs[size_t(e)];
      ids[t * top_k + k] = e;
    }
  }
}

int64_t moeScratchFloats(int64_t rows, int64_t top_k, int64_t hidden, int64_t ffn) {
  // gathered x, gate, up (then act(gate)·up in place), down: one row per (token, k)
  return rows * top_k * (2 * hidden + 2 * ffn);
}

Status moeExperts(const float* x, int64_t rows, const float* weights, const int32_t* ids, int64_t top_k,
                  const ExpertWeights& w, std::span<float> scratch, float* y) {
  const int64_t routed = rows * top_k;
  if (int64_t(scratch.size()) < moeScratchFloats(rows, top_k, w.hidden, w.ffn))
    return makeError("moe scratch holds {} floats, {} rows need {}", scratch.size(), rows,
                     moeScratchFloats(rows, top_k, w.hidden, w.ffn));
  // Counting sort of the (token, k) pairs by expert: group[start[e] ..
  // start[e+1]) are expert e's, in token order.
  std::vector<int64_t> start(size_t(w.experts) + 1, 0);
  for (int64_t i = 0; i < routed; ++i) {
    if (ids[i] < 0 || ids[i] >= w.experts)
      return makeError("token {} is routed to expert {}, outside the {} experts", i / top_k, ids[i], w.experts);
    ++start[size_t(ids[i]) + 1];
  }
  for (int64_t e = 0; e < w.experts; ++e) start[size_t(e) + 1] += start[size_t(e)];
  std::vector<int64_t> group(static_cast<size_t>(routed));
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < routed; ++i) group[size_t(fill[size_t(ids[i])]++)] = i;

  float* xs = scratch.data();
  float* gate = xs + routed * w.hidden;
  float* up = gate + routed * w.ffn;
  float* down = up + routed * w.ffn;
  const int64_t gate_bytes = rowBytes(w.type, w.hidden) * w.ffn;  // one expert's gate or up
  const int64_t down_bytes = rowBytes(w.type, w.ffn) * w.hidden;
  std::memset(y, 0, size_t(rows * w.hidden) * 4);
  for (int64_t e = 0; e < w.experts; ++e) {
    const int64_t n = start[size_t(e) + 1] - start[size_t(e)];
    if (n == 0) continue;
    const int64_t* members = group.data() + start[size_t(e)];
    for (int64_t r = 0; r < n; ++r)
      std::memcpy(xs + r * w.hidden, x + (members[r] / top_k) * w.hidden, size_t(w.hidden) * 4);
    auto at = [&](const void* base, int64_t bytes) { return static_cast<const uint8_t*>(base) + e * bytes; };
    KILN_RETURN_IF_ERROR(linear(xs, n, w.hidden, at(w.gate, gate_bytes), w.type, w.ffn, nullptr, gate));
    KILN_RETURN_IF_ERROR(linear(xs, n, w.hidden, at(w.up, gate_bytes), w.type, w.ffn, nullptr, up));
    KILN_RETURN_IF_ERROR(siluMulSplit(gate, up, w.ffn, n, w.ffn, gate));
    KILN_RETURN_IF_ERROR(linear(gate, n, w.ffn, at(w.down, down_bytes), w.type, w.hidden, nullptr, down));
    // Scattered back weighted, experts in order (as transformers' index_add_).
    for (int64_t r = 0; r < n; ++r) {
      const float scale = weights[members[r]];
      float* out = y + (members[r] / top_k) * w.hidden;
      const float* row = down + r * w.hidden;
      for (int64_t j = 0; j < w.hidden; ++j) out[j] += scale * row[j];
    }
  }
  return {};
}

}  // namespace kiln::cpu
