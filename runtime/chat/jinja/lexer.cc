#include "runtime/chat/jinja/lexer.h"

#include <algorithm>
#include <cctype>

namespace kiln::jinja {

namespace {

// Python's str.isspace over ASCII, the whitespace jinja2's \s strips.
bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string normalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options) : src_(std::move(source)), options_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  Result<std::vector<Token>> run() {
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t open = findTagOpen(pos);
      std::string text = src_.substr(pos, open - pos);
      if (open == src_.size()) {
        emitText(std::move(text), pos);
        break;
      }
      char kind = src_[open + 1];  // '{', '%' or '#'
      char sign = open + 2 < src_.size() ? src_[open + 2] : 0;
      if (sign == '-') {
        size_t keep = text.size();
        while (keep > 0 && isSpace(text[keep - 1])) --keep;
        text.resize(keep);
      } else if (sign != '+' && options_.lstrip_blocks && kind != '{') {
        // Spaces between the line's start and a block tag go, if nothing
        // else stands before the tag on its line.
        size_t line_start = text.rfind('\n');
        line_start = line_start == std::string::npos ? 0 : line_start + 1;
        bool line_starting = pos == 0 || src_[pos - 1] == '\n';
        if ((line_start > 0 || line_starting) && line_start < text.size() &&
            std::all_of(text.begin() + long(line_start), text.end(), isSpace))
          text.resize(line_start);
      }
      emitText(std::move(text), pos);
      size_t body = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      Result<size_t> next = kind == '#' ? skipComment(open, body) : lexTag(open, body, kind);
      if (!next.ok()) return next.error();
      pos = *next;
    }
    tokens_.push_back({TokenKind::kEnd, "", locOf(src_.size())});
    return std::move(tokens_);
  }

 private:
  SourceLoc locOf(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line = size_t(it - line_starts_.begin());
    return {int(line), int(offset - line_starts_[line - 1] + 1)};
  }

  Error errorAt(size_t offset, const std::string& what) const {
    SourceLoc loc = locOf(offset);
    return makeError("line {} column {}: {}", loc.line, loc.column, what);
  }

  size_t findTagOpen(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return src_.size();
  }

  void emitText(std::string text, size_t offset) {
    if (!text.empty()) tokens_.push_back({TokenKind::kText, std::move(text), locOf(offset)});
  }

  // After a closing tag: '-' strips all following whitespace, trim_blocks
  // one newline after block and comment tags.
  size_t afterClose(size_t end, bool minus, bool plus, bool is_block) const {
    if (minus) {
      while (end < src_.size() && isSpace(src_[end])) ++end;
    } else if (!plus && is_block && options_.trim_blocks && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    return end;
  }

  Result<size_t> skipComment(size_t open, size_t body) {
    size_t close = src_.find("#}", body);
    if (close == std::string::npos) return errorAt(open, "unterminated comment '{#'");
    bool minus = close > body && src_[close - 1] == '-';
    bool plus = close > body && src_[close - 1] == '+';
    return afterClose(close + 2, minus, plus, true);
  }

  Result<size_t> lexTag(size_t open, size_t pos, char kind) {
    const bool block = kind == '%';
    tokens_.push_back({block ? TokenKind::kBlockOpen : TokenKind::kOutputOpen, block ? "{%" : "{{", locOf(open)});
    const char close_char = block ? '%' : '}';
    int depth = 0;  // open brackets: '}}' inside a dict literal does not close
    while (true) {
      while (pos < src_.size() && isSpace(src_[pos])) ++pos;
      if (pos >= src_.size())
        return errorAt(open, block ? "unterminated block tag '{%'" : "unterminated expression '{{'");
      // The close, with an optional '-' or '+' before it.
      for (char sign : {'-', '+', '\0'}) {
        size_t at = pos + (sign ? 1 : 0);
        if (sign && (pos >= src_.size() || src_[pos] != sign)) continue;
        if (at + 1 < src_.size() && src_[at] == close_char && src_[at + 1] == '}' && (depth == 0 || block)) {
          tokens_.push_back({block ? TokenKind::kBlockClose : TokenKind::kOutputClose, block ? "%}" : "}}",
                             locOf(pos)});
          return afterClose(at + 2, sign == '-', sign == '+', block);
        }
      }
      char c = src_[pos];
      size_t start = pos;
      if (std::isalpha((unsigned char)c) || c == '_') {
        while (pos < src_.size() && (std::isalnum((unsigned char)src_[pos]) || src_[pos] == '_')) ++pos;
        tokens_.push_back({TokenKind::kName, src_.substr(start, pos - start), locOf(start)});
      } else if (std::isdigit((unsigned char)c)) {
        while (pos < src_.size() && (std::isdigit((unsigned char)src_[pos]) || src_[pos] == '_')) ++pos;
        bool is_float = false;
        if (pos + 1 < src_.size() && src_[pos] == '.' && std::isdigit((unsigned char)src_[pos + 1])) {
          is_float = true;
          ++pos;
          while (pos < src_.size() && std::isdigit((unsigned char)src_[pos])) ++pos;
        }
        if (pos < src_.size() && (src_[pos] == 'e' || src_[pos] == 'E')) {
          size_t e = pos + 1;
          if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
          if (e < src_.size() && std::isdigit((unsigned char)src_[e])) {
            is_float = true;
            pos = e;
            while (pos < src_.size() && std::isdigit((unsigned char)src_[pos])) ++pos;
          }
        }
        std::string digits;
        for (size_t i = start; i < pos; ++i)
          if (src_[i] != '_') digits += src_[i];
        Token t{is_float ? TokenKind::kFloat : TokenKind::kInteger, digits, locOf(start)};
        if (is_float)
          t.number = std::strtod(digits.c_str(), nullptr);
        else
          t.integer = std::strtoll(digits.c_str(), nullptr, 10);
        tokens_.push_back(std::move(t));
      } else if (c == '\'' || c == '"') {
        auto s = lexString(pos);
        if (!s.ok()) return s.error();
        tokens_.push_back({TokenKind::kString, s.take(), locOf(start)});
      } else {
        static const char* kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                           ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|"};
        std::string op;
        for (const char* candidate : kOperators) {
          if (src_.compare(pos, std::char_traits<char>::length(candidate), candidate) == 0) {
            op = candidate;
            break;
          }
        }
        if (op.empty()) return errorAt(pos, fmt::format("unexpected character '{}'", c));
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        pos += op.size();
        tokens_.push_back({TokenKind::kOperator, op, locOf(start)});
      }
    }
  }

  // A quoted literal, its escapes read as Python's unicode-escape reads them.
  Result<std::string> lexString(size_t& pos) {
    const size_t start = pos;
    const char quote = src_[pos++];
    std::string out;
    while (true) {
      if (pos >= src_.size()) return errorAt(start, "unterminated string");
      char c = src_[pos++];
      if (c == quote) return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos >= src_.size()) return errorAt(start, "unterminated string");
      char e = src_[pos++];
      auto hex = [&](int digits) -> bool {
        if (pos + size_t(digits) > src_.size()) return false;
        char32_t cp = 0;
        for (int i = 0; i < digits; ++i) {
          char h = src_[pos + size_t(i)];
          if (!std::isxdigit((unsigned char)h)) return false;
          cp = cp * 16 + char32_t(std::isdigit((unsigned char)h) ? h - '0' : std::tolower(h) - 'a' + 10);
        }
        pos += size_t(digits);
        out += encodeCodePoint(cp);
        return true;
      };
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;  // a backslash-newline continues the line
        case 'x':
          if (!hex(2)) return errorAt(pos - 2, "invalid \\x escape");
          break;
        case 'u':
          if (!hex(4)) return errorAt(pos - 2, "invalid \\u escape");
          break;
        case 'U':
          if (!hex(8)) return errorAt(pos - 2, "invalid \\U escape");
          break;
        default:
          if (e >= '0' && e <= '7') {
            int value = e - '0';
            for (int i = 0; i < 2 && pos < src_.size() && src_[pos] >= '0' && src_[pos] <= '7'; ++i)
              value = value * 8 + (src_[pos++] - '0');
            out += encodeCodePoint(char32_t(value));
          } else {
            out += '\\';  // unknown escapes stay as written
            out += e;
          }
      }
    }
  }

  static std::string encodeCodePoint(char32_t cp) {
    std::string out;
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
    return out;
  }

  std::string src_;
  LexerOptions options_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(normalizeNewlines(source), options).run();
}

}  // namespace kiln::jinja
