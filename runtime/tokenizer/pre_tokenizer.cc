#include "runtime/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "runtime/tokenizer/utf8.h"

namespace kiln {

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

Result<PreTokenizer> PreTokenizer::create(
    const std::vector<std::string>& regexes) {
  PreTokenizer result;
  for (const std::string& regex : regexes) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    auto compiled = std::make_unique<Compiled>();
    compiled->code = pcre2_compile(
        reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(),
        PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
    if (compiled->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error_code, message, sizeof(message));
      return makeError("pre-tokenizer regex '{}': {} at offset {}", regex,
                       reinterpret_cast<const char*>(message), error_offset);
    }
    // JIT is an optimisation only; the interpreter gives the same matches.
    pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
    result.patterns_.push_back(std::move(compiled));
  }
  return result;
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  std::vector<std::string_view> next;
  for (const auto& pattern : patterns_) {
    pcre2_match_data* match =
        pcre2_match_data_create_from_pattern(pattern->code, nullptr);
    next.clear();
    for (std::string_view piece : pieces) {
      size_t start = 0;  // first byte not yet emitted
      size_t search = 0;
      while (search < piece.size()) {
        int rc = pcre2_match(pattern->code,
                             reinterpret_cast<PCRE2_SPTR>(piece.data()),
                             piece.size(), search, PCRE2_NO_UTF_CHECK, match,
                             nullptr);
        if (rc < 0) break;  // no more matches (or a match-limit error)
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
        size_t begin = ovector[0], end = ovector[1];
        if (end == begin) {
          // An empty match splits nothing; step over one code point.
          search = begin + utf8::sequenceLength(
                               static_cast<unsigned char>(piece[begin]));
          continue;
        }
        if (begin > start) next.push_back(piece.substr(start, begin - start));
        next.push_back(piece.substr(begin, end - begin));
        start = search = end;
      }
      if (start < piece.size()) next.push_back(piece.substr(start));
    }
    pcre2_match_data_free(match);
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace kiln
