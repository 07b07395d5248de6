// Splits template source into text and tag tokens the way jinja2's lexer
// does under transformers' settings: {{ }}, {% %}, {# #}, '-' and '+'
// whitespace control, trim_blocks (the newline after a block or comment
// tag is dropped) and lstrip_blocks (spaces before a block or comment tag
// that starts a line are dropped), \r\n read as \n, and one trailing
// newline of the source dropped (keep_trailing_newline=False).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/support/error.h"

namespace kiln::jinja {

// 1-based line and column of a token in the template source.
struct SourceLoc {
  int line = 1;
  int column = 1;
};

enum class TokenKind {
  kText,        // literal output, whitespace control already applied
  kOutputOpen,  // {{
  kOutputClose, // }}
  kBlockOpen,   // {%
  kBlockClose,  // %}
  kName,
  kString,      // text holds the decoded value
  kInteger,
  kFloat,
  kOperator,    // + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
  kEnd,
};

struct Token {
  TokenKind kind;
  std::string text;
  SourceLoc loc;
  int64_t integer = 0;
  double number = 0;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Errors name the line and column ("line 3 column 7: unterminated string").
Result<std::vector<Token>> tokenize(std::string_view source, const LexerOptions& options = {});

}  // namespace kiln::jinja
