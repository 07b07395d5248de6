#include "runtime/tokenizer/utf8.h"

namespace kiln::utf8 {

size_t validSequenceAt(std::string_view text, size_t pos) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return 1;
  size_t len = sequenceLength(lead);
  if (len == 1 || pos + len > text.size()) return 0;
  uint32_t cp = lead & (0xFF >> (len + 1));
  for (size_t i = 1; i < len; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(pos + i) & 0x3F);
  }
  static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[len] || cp > 0x10FFFF) return 0;
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
  return len;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string sanitize(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = validSequenceAt(text, pos);
    if (len == 0) {
      append(out, 0xFFFD);
      ++pos;
    } else {
      out.append(text.substr(pos, len));
      pos += len;
    }
  }
  return out;
}

bool isIncompleteSequence(std::string_view text, size_t pos) {
  const unsigned char lead = static_cast<unsigned char>(text[pos]);
  if (lead < 0xC2 || lead > 0xF4) return false;  // ASCII, continuation, bad
  const size_t len = sequenceLength(lead);
  if (pos + len <= text.size()) return false;  // all bytes present
  for (size_t i = pos + 1; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    // The second byte is narrowed after E0/ED/F0/F4 so that overlong forms,
    // surrogates and values past U+10FFFF are refused early.
    unsigned char low = 0x80, high = 0xBF;
    if (i == pos + 1) {
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    }
    if (c < low || c > high) return false;
  }
  return true;
}

static ByteLevelAlphabet buildAlphabet() {
  ByteLevelAlphabet a;
  a.codepoint_to_byte.fill(-1);
  // Printable Latin-1 bytes stand for themselves; the other 68 bytes take the
  // code points 256, 257, ... in byte order (the GPT-2 convention).
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
           (b >= 0xAE && b <= 0xFF);
  };
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    uint32_t cp = printable(b) ? static_cast<uint32_t>(b) : next++;
    append(a.byte_to_text[b], cp);
    a.codepoint_to_byte[cp] = static_cast<int16_t>(b);
  }
  return a;
}

const ByteLevelAlphabet& byteLevelAlphabet() {
  static const ByteLevelAlphabet alphabet = buildAlphabet();
  return alphabet;
}

std::string byteLevelEncode(std::string_view bytes) {
  const auto& a = byteLevelAlphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) out += a.byte_to_text[c];
  return out;
}

std::string byteLevelDecode(std::string_view text) {
  const auto& a = byteLevelAlphabet();
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = validSequenceAt(text, pos);
    if (len == 0) {  // not UTF-8 at all: pass the byte through
      out.push_back(text[pos++]);
      continue;
    }
    uint32_t cp = 0;
    if (len == 1) {
      cp = static_cast<unsigned char>(text[pos]);
    } else if (len == 2) {
      cp = ((text[pos] & 0x1F) << 6) | (text[pos + 1] & 0x3F);
    } else {
      cp = 0x200;  // 3- and 4-byte code points are never in the alphabet
    }
    if (cp < a.codepoint_to_byte.size() && a.codepoint_to_byte[cp] >= 0) {
      out.push_back(static_cast<char>(a.codepoint_to_byte[cp]));
    } else {
      out.append(text.substr(pos, len));
    }
    pos += len;
  }
  return out;
}

}  // namespace kiln::utf8
