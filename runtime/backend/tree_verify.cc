#include "runtime/backend/tree_verify.h"

#include <cmath>
#include <cstring>

namespace kiln {

Status checkTreeParents(std::span<const int32_t> parents, std::span<const int32_t> query_start, int64_t max_nodes) {
  const size_t b = query_start.size() - 1;
  if (query_start.empty() || parents.size() != size_t(query_start[b]))
    return makeError("verify: parents has {} entries; expected one per token ({})", parents.size(),
                     query_start.empty() ? 0 : query_start[b]);
  for (size_t s = 0; s < b; ++s) {
    const int32_t q0 = query_start[s], q1 = query_start[s + 1];
    if (q1 - q0 > max_nodes)
      return makeError("verify: sequence {} brings a tree of {} nodes; the plan's tree holds {}", s, q1 - q0,
                       max_nodes);
    for (int32_t i = q0; i < q1; ++i) {
      const int32_t parent = parents[size_t(i)], local = i - q0;
      if (local == 0 ? parent != -1 : (parent < 0 || parent >= local))
        return makeError("verify: parents[{}] = {} (node {} of sequence {}); expected {}", i, parent, local, s,
                         local == 0 ? "-1 for the root" : "an earlier node of the same tree");
    }
  }
  return {};
}

void treePositions(std::span<const int32_t> parents, std::span<const int32_t> base_positions,
                   std::span<const int32_t> query_start, int32_t* positions) {
  for (size_t s = 0; s + 1 < query_start.size(); ++s)
    for (int32_t i = query_start[s]; i < query_start[s + 1]; ++i) {
      const int32_t parent = parents[size_t(i)];
      positions[i] = parent < 0 ? base_positions[s] : positions[query_start[s] + parent] + 1;
    }
}

void treeAncestorMask(std::span<const int32_t> parents, std::span<const int32_t> query_start, int64_t stride,
                      uint8_t* mask) {
  for (size_t s = 0; s + 1 < query_start.size(); ++s) {
    const int32_t q0 = query_start[s];
    for (int32_t i = q0; i < query_start[s + 1]; ++i) {
      uint8_t* row = mask + int64_t(i) * stride;
      std::memset(row, 0, size_t(stride));
      for (int32_t node = i - q0; node >= 0; node = parents[size_t(q0 + node)]) row[node] = 1;
    }
  }
}

namespace {

int32_t argmax(const float* row, int64_t vocab) {
  int64_t best = -1;
  for (int64_t v = 0; v < vocab; ++v)
    if (!std::isnan(row[v]) && (best < 0 || row[v] > row[best])) best = v;
  return int32_t(best < 0 ? 0 : best);
}

}  // namespace

namespace {

// The walk both acceptances share; `target(node)`: the argmax of node's row
// (a global index).
template <class Target>
void acceptPath(Target target, std::span<const int32_t> tokens, std::span<const int32_t> parents,
                std::span<const int32_t> query_start, int64_t width, int32_t* accepted, int32_t* count) {
  for (size_t s = 0; s + 1 < query_start.size(); ++s) {
    const int32_t q0 = query_start[s], q1 = query_start[s + 1];
    int32_t* path = accepted + int64_t(s) * width;
    for (int64_t d = 0; d < width; ++d) path[d] = -1;
    int32_t node = 0;
    int64_t length = 0;
    path[length++] = 0;
    while (length < width) {
      const int32_t wanted = target(q0 + node);
      int32_t next = -1;
      for (int32_t c = q0 + node + 1; c < q1 && next < 0; ++c)
        if (parents[size_t(c)] == node && tokens[size_t(c)] == wanted) next = c - q0;
      if (next < 0) break;
      path[length++] = next;
      node = next;
    }
    count[s] = int32_t(length - 1);
  }
}

}  // namespace

void acceptGreedy(std::span<const float> logits, int64_t vocab, std::span<const int32_t> tokens,
                  std::span<const int32_t> parents, std::span<const int32_t> query_start, int64_t width,
                  int32_t* accepted, int32_t* count) {
  acceptPath([&](int32_t t) { return argmax(logits.data() + int64_t(t) * vocab, vocab); }, tokens, parents,
             query_start, width, accepted, count);
}

void acceptGreedyTargets(std::span<const int32_t> targets, std::span<const int32_t> tokens,
                         std::span<const int32_t> parents, std::span<const int32_t> query_start, int64_t width,
                         int32_t* accepted, int32_t* count) {
  acceptPath([&](int32_t t) { return targets[size_t(t)]; }, tokens, parents, query_start, width, accepted, count);
}

}  // namespace kiln
