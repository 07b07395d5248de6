#include "runtime/chat/jinja/json.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace kiln::jinja {

namespace {

Value fromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List list;
      for (const auto& item : j) list.push_back(fromJson(item));
      return Value(std::move(list));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict dict;
      for (const auto& [key, item] : j.items()) dict.set(key, fromJson(item));
      return Value(std::move(dict));
    }
    default:
      return Value::none();
  }
}

void writeString(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  std::u32string points;
  if (ensure_ascii) points = decodeUtf8(s);
  auto escape = [&](char32_t c) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
    out += buf;
  };
  auto one = [&](char32_t c, std::string_view raw) {
    switch (c) {
      case '"':
        out += "\\\"";
        return;
      case '\\':
        out += "\\\\";
        return;
      case '\n':
        out += "\\n";
        return;
      case '\r':
        out += "\\r";
        return;
      case '\t':
        out += "\\t";
        return;
      case '\b':
        out += "\\b";
        return;
      case '\f':
        out += "\\f";
        return;
    }
    if (c < 0x20) {
      escape(c);
    } else if (ensure_ascii && c > 0x7e) {
      if (c >= 0x10000) {  // a surrogate pair, as Python writes it
        char32_t v = c - 0x10000;
        escape(0xD800 + (v >> 10));
        escape(0xDC00 + (v & 0x3FF));
      } else {
        escape(c);
      }
    } else {
      out += raw;
    }
  };
  if (ensure_ascii) {
    for (char32_t c : points) one(c, encodeUtf8(std::u32string_view(&c, 1)));
  } else {
    for (size_t i = 0; i < s.size(); ++i) one(char32_t((unsigned char)s[i]), std::string_view(&s[i], 1));
  }
  out += '"';
}

Status write(const Value& v, const JsonFormat& f, int depth, std::string& out) {
  auto newline = [&](int level) {
    if (!f.pretty) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += f.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return Status::success();
    case Value::Kind::kBool:
      out += v.asBool() ? "true" : "false";
      return Status::success();
    case Value::Kind::kInt:
      out += std::to_string(v.asInt());
      return Status::success();
    case Value::Kind::kFloat: {
      double d = v.asFloat();
      out += d != d ? "NaN" : d == 1.0 / 0.0 ? "Infinity" : d == -1.0 / 0.0 ? "-Infinity" : formatFloat(d);
      return Status::success();
    }
    case Value::Kind::kString:
      writeString(v.asString(), f.ensure_ascii, out);
      return Status::success();
    case Value::Kind::kList: {
      const List& list = v.asList();
      if (list.empty()) {
        out += "[]";
        return Status::success();
      }
      out += '[';
      for (size_t i = 0; i < list.size(); ++i) {
        if (i) out += f.item_separator;
        newline(depth + 1);
        KILN_RETURN_IF_ERROR(write(list[i], f, depth + 1, out));
      }
      newline(depth);
      out += ']';
      return Status::success();
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      std::vector<const Dict::Entry*> entries;
      const Dict& dict = v.isDict() ? v.asDict() : v.namespaceAttributes();
      for (const Dict::Entry& e : dict.entries()) entries.push_back(&e);
      if (f.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const Dict::Entry* a, const Dict::Entry* b) { return a->first < b->first; });
      if (entries.empty()) {
        out += "{}";
        return Status::success();
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += f.item_separator;
        newline(depth + 1);
        writeString(entries[i]->first, f.ensure_ascii, out);
        out += f.key_separator;
        KILN_RETURN_IF_ERROR(write(entries[i]->second, f, depth + 1, out));
      }
      newline(depth);
      out += '}';
      return Status::success();
    }
    default:
      return makeError("Object of type {} is not JSON serializable", v.typeName());
  }
}

}  // namespace

Result<Value> parseJson(std::string_view text) {
  auto j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return makeError("invalid JSON: '{}'", text.substr(0, 60));
  return fromJson(j);
}

Result<std::string> toJson(const Value& value, const JsonFormat& format) {
  std::string out;
  KILN_RETURN_IF_ERROR(write(value, format, 0, out));
  return out;
}

}  // namespace kiln::jinja
