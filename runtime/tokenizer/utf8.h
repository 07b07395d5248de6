// UTF-8 helpers and the GPT-2 byte-to-unicode table used by byte-level BPE.
//
// Byte-level BPE vocabularies (GPT-2, Llama-3, Qwen2, SmolLM) store tokens as
// strings over a 256-character alphabet: every byte maps to one printable code
// point, so that merges and vocab files never contain raw control bytes or
// spaces (space 0x20 becomes U+0120 'Ġ', newline 0x0A becomes U+010A 'Ċ').
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::utf8 {

// Length of the UTF-8 sequence introduced by `lead`, from the lead byte alone
// (1 for continuation or invalid bytes, so loops always advance).
inline size_t sequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Length of the well-formed code point starting at text[pos], or 0 when the
// bytes there are not well-formed UTF-8 (overlong forms, surrogates and
// values above U+10FFFF are rejected, as RFC 3629 requires).
size_t validSequenceAt(std::string_view text, size_t pos);

// Appends code point `cp` encoded as UTF-8.
void append(std::string& out, uint32_t cp);

// Replaces every byte that does not start a well-formed sequence with U+FFFD,
// one replacement per bad byte (llama.cpp's choice, so ids stay comparable).
std::string sanitize(std::string_view text);

// True when text[pos..] is a proper prefix of some well-formed sequence:
// the bytes a streaming decoder must hold back until more arrive.
bool isIncompleteSequence(std::string_view text, size_t pos);

// GPT-2 byte-level alphabet.
struct ByteLevelAlphabet {
  // Byte value -> the code point standing for it, UTF-8 encoded.
  std::array<std::string, 256> byte_to_text;
  // Code point (< 0x200 is enough for the alphabet) -> byte, or -1.
  std::array<int16_t, 0x200> codepoint_to_byte;
};
const ByteLevelAlphabet& byteLevelAlphabet();

// Maps each byte of `bytes` to its alphabet character.
std::string byteLevelEncode(std::string_view bytes);
// Inverse of byteLevelEncode. Code points outside the alphabet (as in
// added tokens stored verbatim) are copied through unchanged.
std::string byteLevelDecode(std::string_view text);

}  // namespace kiln::utf8
