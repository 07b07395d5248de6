// Python's str operations over UTF-8 text, by code point: strip with
// Python's whitespace set, split, case changes (ASCII letters only).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln::jinja {

enum class StripSide { kBoth, kLeft, kRight };
// str.strip(chars): `chars` null strips Python's whitespace.
std::string pyStrip(std::string_view text, const std::string* chars, StripSide side);
// str.split(sep, maxsplit): `sep` null splits on whitespace runs.
std::vector<std::string> pySplit(std::string_view text, const std::string* sep, long maxsplit);
std::string asciiLower(std::string_view text);
std::string asciiUpper(std::string_view text);
// str.capitalize and jinja2's title filter.
std::string pyCapitalize(std::string_view text);
std::string jinjaTitle(std::string_view text);
// str.replace(old, new, count); count < 0 replaces all.
std::string pyReplace(std::string_view text, std::string_view from, std::string_view to, long count);

}  // namespace kiln::jinja
