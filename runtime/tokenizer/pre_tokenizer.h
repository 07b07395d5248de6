// Regex pre-tokenizer for byte-level BPE: splits text into words that BPE
// merges never cross. Runs a sequence of PCRE2 patterns (UTF + UCP, so \s,
// \p{L}, \p{N} follow Unicode), each refining the pieces of the previous one.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/support/error.h"

namespace kiln {

class PreTokenizer {
 public:
  // Compiles the patterns; a bad pattern gives an error naming it and the
  // offset PCRE2 reports.
  static Result<PreTokenizer> create(const std::vector<std::string>& regexes);

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Splits `text` (which must be valid UTF-8; see utf8::sanitize) into
  // contiguous pieces covering all of it. Each pattern runs on each piece
  // separately, as llama.cpp and HF tokenizers do, so a lookahead like
  // \s+(?!\S) cannot see past the end of its piece. Both the matches and the
  // unmatched gaps between them become pieces.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Compiled;
  PreTokenizer() = default;
  std::vector<std::unique_ptr<Compiled>> patterns_;
};

}  // namespace kiln
