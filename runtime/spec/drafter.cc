#include "runtime/spec/drafter.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace kiln::spec {

int64_t TreeShape::nodes() const {
  int64_t level = 1, total = 1;
  for (int64_t w : widths) {
    level *= w;
    total += level;
  }
  return total;
}

bool TreeShape::isChain() const {
  return std::all_of(widths.begin(), widths.end(), [](int64_t w) { return w == 1; });
}

std::string TreeShape::text() const {
  if (isChain()) return fmt::format("chain:{}", widths.size());
  return fmt::format("widths:{}", fmt::join(widths, ","));
}

Result<TreeShape> parseTreeShape(std::string_view text) {
  auto number = [](std::string_view s, int64_t& out) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && end == s.data() + s.size() && out >= 1;
  };
  TreeShape shape;
  if (text.starts_with("chain:")) {
    int64_t k = 0;
    if (!number(text.substr(6), k) || k > 1024) return makeError("invalid tree '{}': expected chain:K, K >= 1", text);
    return TreeShape::chain(k);
  }
  if (!text.starts_with("widths:")) return makeError("invalid tree '{}': expected chain:K or widths:W1,W2,...", text);
  std::string_view rest = text.substr(7);
  while (true) {
    const size_t comma = rest.find(',');
    int64_t w = 0;
    if (!number(rest.substr(0, comma), w) || w > 1024)
      return makeError("invalid tree '{}': expected widths:W1,W2,... with each W >= 1", text);
    shape.widths.push_back(w);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  if (shape.nodes() > 1024) return makeError("invalid tree '{}': more than 1024 nodes", text);
  return shape;
}

Status NgramDrafter::propose(std::span<const DraftRequest> rows) {
  for (const DraftRequest& row : rows) propose(row.history, row.shape, *row.out);
  return {};
}

void NgramDrafter::propose(std::span<const int32_t> history, const TreeShape& shape, DraftTree& out) {
  const int64_t len = int64_t(history.size());
  out.reset(len > 0 ? history.back() : 0);
  if (len < 2 || shape.depth() == 0) return;
  const int64_t full = shape.nodes();
  // A match of the suffix ending at `end` (exclusive) proposes
  // history[end, end + depth); the suffix itself ends at len.
  for (int n = int(std::min<int64_t>(max_ngram_, len - 1)); n >= 1; --n) {
    std::span<const int32_t> suffix = history.subspan(size_t(len - n));
    for (int64_t end = len - 1; end >= n; --end) {
      if (!std::equal(suffix.begin(), suffix.end(), history.begin() + (end - n))) continue;
      // Walk the continuation into the tree, each depth within its width.
      int32_t node = 0;
      for (int64_t d = 0; d < shape.depth() && end + d < len; ++d) {
        const int32_t token = history[size_t(end + d)];
        int32_t child = -1, children = 0;
        for (int32_t c = node + 1; c < int32_t(out.size()); ++c)
          if (out.parents[size_t(c)] == node) {
            ++children;
            if (out.tokens[size_t(c)] == token) child = c;
          }
        if (child < 0) {
          if (children >= shape.widths[size_t(d)]) break;
          child = out.add(node, token);
        }
        node = child;
      }
      if (out.size() == full) return;
    }
  }
}

}  // namespace kiln::spec
