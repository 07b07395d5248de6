// Inputs of the fuzzers that read more than one document (a template and its
// messages, a config.json and a checkpoint): the parts are separated by the
// line "%%", so seeds stay readable text and libFuzzer's mutations can move
// the boundary.
//
//   template text\n%%\n[{"role": "user", "content": "hi"}]
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace kiln::fuzz {

inline constexpr std::string_view kPartSeparator = "\n%%\n";

// Exactly `count` parts: missing ones are empty, and the last part keeps any
// further separators.
inline std::vector<std::string_view> splitParts(const uint8_t* data, size_t size, size_t count) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < count) {
    size_t at = rest.find(kPartSeparator);
    if (at == std::string_view::npos) break;
    parts.push_back(rest.substr(0, at));
    rest.remove_prefix(at + kPartSeparator.size());
  }
  parts.push_back(rest);
  parts.resize(count);
  return parts;
}

}  // namespace kiln::fuzz
