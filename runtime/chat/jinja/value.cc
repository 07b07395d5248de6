#include "runtime/chat/jinja/value.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kiln::jinja {

const Value* CallArgs::find(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [key, value] : keyword)
    if (key == name) return &value;
  return nullptr;
}

const Value* CallArgs::keywordArg(std::string_view name) const {
  for (const auto& [key, value] : keyword)
    if (key == name) return &value;
  return nullptr;
}

Value Value::undefined(std::string hint) {
  Value v;
  v.data_ = Undefined{std::move(hint)};
  return v;
}

Value Value::none() {
  Value v;
  v.data_ = None{};
  return v;
}

Value::Value(List list) : data_(std::make_shared<const List>(std::move(list))) {}
Value Value::tuple(List items) {
  Value v(std::move(items));
  v.tuple_ = true;
  return v;
}

Value::Value(Dict dict) : data_(std::make_shared<const Dict>(std::move(dict))) {}

Value Value::makeNamespace(Dict attributes) {
  Value v;
  v.data_ = std::make_shared<Dict>(std::move(attributes));
  return v;
}

Value Value::function(Function fn) {
  Value v;
  v.data_ = std::make_shared<const Function>(std::move(fn));
  return v;
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return asBool();
    case Kind::kInt:
      return asInt() != 0;
    case Kind::kFloat:
      return asFloat() != 0.0;
    case Kind::kString:
      return !asString().empty();
    case Kind::kList:
      return !asList().empty();
    case Kind::kDict:
      return asDict().size() != 0;
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string_view Value::typeName() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

const Value* Dict::find(std::string_view key) const {
  for (const Entry& e : entries_)
    if (e.first == key) return &e.second;
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  for (Entry& e : entries_) {
    if (e.first == key) {
      e.second = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

std::string formatFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // Shortest %.{p}e that reads back exactly, then laid out as Python's repr:
  // positional for exponents -4 <= e < 16, scientific beyond.
  char buf[64];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  size_t e_pos = s.find('e');
  std::string mantissa = s.substr(0, e_pos);
  int exponent = std::atoi(s.c_str() + e_pos + 1);
  bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits.push_back(c);
  std::string out;
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out = "0." + std::string(size_t(-exponent - 1), '0') + digits;
    } else if (size_t(exponent + 1) >= digits.size()) {
      out = digits + std::string(size_t(exponent + 1) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, size_t(exponent + 1)) + "." + digits.substr(size_t(exponent + 1));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp_buf;
  }
  return negative ? "-" + out : out;
}

namespace {

// Python's repr of a str: single quotes unless the text holds a single
// quote and no double quote; printable non-ASCII kept as is.
std::string reprString(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c == quote) {
          out += '\\';
          out += char(c);
        } else if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string toRepr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString:
      return reprString(v.asString());
    case Value::Kind::kList: {
      std::string out = v.isTuple() ? "(" : "[";
      const List& list = v.asList();
      for (size_t i = 0; i < list.size(); ++i) {
        if (i) out += ", ";
        out += toRepr(list[i]);
      }
      if (v.isTuple()) return out + (list.size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, value] : v.asDict().entries()) {
        if (!first) out += ", ";
        first = false;
        out += reprString(key) + ": " + toRepr(value);
      }
      return out + "}";
    }
    default:
      return toDisplayString(v);
  }
}

std::string toDisplayString(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.asBool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.asInt());
    case Value::Kind::kFloat:
      return formatFloat(v.asFloat());
    case Value::Kind::kString:
      return v.asString();
    case Value::Kind::kList:
    case Value::Kind::kDict:
      return toRepr(v);
    case Value::Kind::kNamespace:
      return "<Namespace>";
    case Value::Kind::kFunction:
      return "<function>";
  }
  return "";
}

bool equals(const Value& a, const Value& b) {
  if (a.isNumber() && b.isNumber()) {
    if (a.isFloat() || b.isFloat()) return a.asFloat() == b.asFloat();
    return a.asInt() == b.asInt();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.asString() == b.asString();
    case Value::Kind::kList: {
      const List& x = a.asList();
      const List& y = b.asList();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.asDict();
      const Dict& y = b.asDict();
      if (x.size() != y.size()) return false;
      for (const auto& [key, value] : x.entries()) {
        const Value* other = y.find(key);
        if (!other || !equals(value, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.namespaceAttributes() == &b.namespaceAttributes();
    default:
      return false;
  }
}

Result<bool> lessThan(const Value& a, const Value& b) {
  if (a.isNumber() && b.isNumber()) {
    if (a.isFloat() || b.isFloat()) return a.asFloat() < b.asFloat();
    return a.asInt() < b.asInt();
  }
  if (a.isString() && b.isString()) return a.asString() < b.asString();
  if (a.isList() && b.isList()) {
    const List& x = a.asList();
    const List& y = b.asList();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return lessThan(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return makeError("'<' not supported between instances of '{}' and '{}'", a.typeName(), b.typeName());
}

std::u32string decodeUtf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    unsigned char c = text[i];
    int extra = c < 0x80 ? 0 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
    char32_t cp = extra == 0 ? c : extra == 1 ? (c & 0x1F) : extra == 2 ? (c & 0x0F) : (c & 0x07);
    size_t j = 1;
    for (; j <= size_t(extra) && i + j < text.size(); ++j) cp = (cp << 6) | (text[i + j] & 0x3F);
    out.push_back(cp);
    i += j;
  }
  return out;
}

std::string encodeUtf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : text) {
    if (cp < 0x80) {
      out.push_back(char(cp));
    } else if (cp < 0x800) {
      out.push_back(char(0xC0 | (cp >> 6)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(char(0xE0 | (cp >> 12)));
      out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(char(0xF0 | (cp >> 18)));
      out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

}  // namespace kiln::jinja
