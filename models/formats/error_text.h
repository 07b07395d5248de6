// Names read from a file (metadata keys, tensor names) go into one-line error
// messages; a corrupt or hostile file can put newlines, escape sequences or
// megabytes into them. printable() makes such text safe to show.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace kiln::formats {

// Control bytes become \xNN; text past `max_bytes` is cut and its length noted.
inline std::string printable(std::string_view text, size_t max_bytes = 100) {
  std::string out;
  std::string_view shown = text.substr(0, max_bytes);
  out.reserve(shown.size());
  for (char c : shown) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  if (text.size() > max_bytes) out += fmt::format("...({} bytes)", text.size());
  return out;
}

}  // namespace kiln::formats
