#include "runtime/chat/jinja/text.h"

#include <cctype>

#include "runtime/chat/jinja/value.h"

namespace kiln::jinja {

namespace {

// str.isspace() for one code point.
bool isPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
         c == 0x3000;
}

}  // namespace

std::string pyStrip(std::string_view text, const std::string* chars, StripSide side) {
  std::u32string s = decodeUtf8(text);
  std::u32string set = chars ? decodeUtf8(*chars) : std::u32string();
  auto strip = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : isPySpace(c); };
  size_t begin = 0, end = s.size();
  if (side != StripSide::kRight)
    while (begin < end && strip(s[begin])) ++begin;
  if (side != StripSide::kLeft)
    while (end > begin && strip(s[end - 1])) --end;
  return encodeUtf8(std::u32string_view(s).substr(begin, end - begin));
}

std::vector<std::string> pySplit(std::string_view text, const std::string* sep, long maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || long(out.size()) < maxsplit) {
      size_t at = text.find(*sep, pos);
      if (at == std::string_view::npos) break;
      out.emplace_back(text.substr(pos, at - pos));
      pos = at + sep->size();
    }
    out.emplace_back(text.substr(pos));
    return out;
  }
  std::u32string s = decodeUtf8(text);
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && isPySpace(s[i])) ++i;
    if (i >= s.size()) break;
    if (maxsplit >= 0 && long(out.size()) >= maxsplit) {
      size_t end = s.size();
      while (end > i && isPySpace(s[end - 1])) --end;
      out.push_back(encodeUtf8(std::u32string_view(s).substr(i, end - i)));
      break;
    }
    size_t start = i;
    while (i < s.size() && !isPySpace(s[i])) ++i;
    out.push_back(encodeUtf8(std::u32string_view(s).substr(start, i - start)));
  }
  return out;
}

std::string asciiLower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = char(std::tolower((unsigned char)c));
  return out;
}

std::string asciiUpper(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = char(std::toupper((unsigned char)c));
  return out;
}

std::string pyCapitalize(std::string_view text) {
  std::string out = asciiLower(text);
  if (!out.empty()) out[0] = char(std::toupper((unsigned char)out[0]));
  return out;
}

std::string jinjaTitle(std::string_view text) {
  // jinja2 splits at runs of [-\s({[<] and capitalizes every piece (the
  // runs themselves are unaffected by capitalization).
  auto boundary = [](char c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || std::isspace((unsigned char)c);
  };
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    bool run = boundary(text[i]);
    while (i < text.size() && boundary(text[i]) == run) ++i;
    out += pyCapitalize(text.substr(start, i - start));
  }
  return out;
}

std::string pyReplace(std::string_view text, std::string_view from, std::string_view to, long count) {
  std::string out;
  size_t pos = 0;
  long done = 0;
  if (from.empty()) {  // Python inserts `to` between every character
    std::u32string s = decodeUtf8(text);
    for (char32_t c : s) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      out += encodeUtf8(std::u32string_view(&c, 1));
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  while (count < 0 || done < count) {
    size_t at = text.find(from, pos);
    if (at == std::string_view::npos) break;
    out += text.substr(pos, at - pos);
    out += to;
    pos = at + from.size();
    ++done;
  }
  out += text.substr(pos);
  return out;
}

}  // namespace kiln::jinja
