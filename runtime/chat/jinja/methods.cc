// Attribute and item lookup, iteration, and the str / dict methods a
// template may call (the sandbox's non-mutating ones).
#include <cstdlib>

#include "runtime/chat/jinja/builtins.h"
#include "runtime/chat/jinja/text.h"

namespace kiln::jinja {

namespace {

Error wrongArgs(std::string_view method, std::string_view expected) {
  return makeError("{}() takes {}", method, expected);
}

const std::string* optionalString(const CallArgs& args, size_t index, std::string_view name) {
  const Value* v = args.find(index, name);
  return v && v->isString() ? &v->asString() : nullptr;
}

long optionalInt(const CallArgs& args, size_t index, std::string_view name, long fallback) {
  const Value* v = args.find(index, name);
  return v && v->isInt() ? long(v->asInt()) : fallback;
}

Result<Value> stringMethod(const std::string& s, const std::string& name, const CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    StripSide side = name == "strip" ? StripSide::kBoth : name == "lstrip" ? StripSide::kLeft : StripSide::kRight;
    return Value(pyStrip(s, optionalString(args, 0, "chars"), side));
  }
  if (name == "split") {
    List parts;
    for (std::string& p : pySplit(s, optionalString(args, 0, "sep"), optionalInt(args, 1, "maxsplit", -1)))
      parts.push_back(Value(std::move(p)));
    return Value(std::move(parts));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* arg = args.find(0, "prefix");
    if (!arg) return wrongArgs(name, "a prefix");
    List options = arg->isList() ? arg->asList() : List{*arg};
    for (const Value& o : options) {
      if (!o.isString()) return wrongArgs(name, "a str or a tuple of str");
      const std::string& p = o.asString();
      bool hit = name == "startswith" ? s.compare(0, p.size(), p) == 0
                                      : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
      if (hit) return Value(true);
    }
    return Value(false);
  }
  if (name == "upper") return Value(asciiUpper(s));
  if (name == "lower") return Value(asciiLower(s));
  if (name == "title") return Value(jinjaTitle(s));
  if (name == "capitalize") return Value(pyCapitalize(s));
  if (name == "replace") {
    const std::string* from = optionalString(args, 0, "old");
    const std::string* to = optionalString(args, 1, "new");
    if (!from || !to) return wrongArgs(name, "two str arguments");
    return Value(pyReplace(s, *from, *to, optionalInt(args, 2, "count", -1)));
  }
  if (name == "find" || name == "count") {
    const std::string* sub = optionalString(args, 0, "sub");
    if (!sub) return wrongArgs(name, "a str argument");
    if (name == "find") {
      size_t at = s.find(*sub);
      return Value(at == std::string::npos ? int64_t(-1) : int64_t(decodeUtf8(s.substr(0, at)).size()));
    }
    int64_t n = 0;
    for (size_t at = s.find(*sub); !sub->empty() && at != std::string::npos; at = s.find(*sub, at + sub->size()))
      ++n;
    return Value(n);
  }
  if (name == "join") {
    const Value* items = args.find(0, "iterable");
    if (!items) return wrongArgs(name, "an iterable");
    auto list = iterate(*items);
    if (!list.ok()) return list.error();
    std::string out;
    for (size_t i = 0; i < list->size(); ++i) {
      if (i) out += s;
      if (!(*list)[i].isString()) return makeError("sequence item {}: expected str instance", i);
      out += (*list)[i].asString();
    }
    return Value(std::move(out));
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum") {
    if (s.empty()) return Value(false);
    for (unsigned char c : s) {
      bool ok = name == "isdigit"   ? std::isdigit(c) != 0
                : name == "isspace" ? std::isspace(c) != 0
                : name == "isalpha" ? std::isalpha(c) != 0
                                    : std::isalnum(c) != 0;
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  return makeError("str has no method '{}'", name);
}

Result<Value> dictMethod(const Dict& d, const std::string& name, const CallArgs& args) {
  if (name == "items") {
    List out;
    for (const auto& [key, value] : d.entries()) out.push_back(Value::tuple(List{Value(key), value}));
    return Value(std::move(out));
  }
  if (name == "keys") {
    List out;
    for (const auto& entry : d.entries()) out.push_back(Value(entry.first));
    return Value(std::move(out));
  }
  if (name == "values") {
    List out;
    for (const auto& entry : d.entries()) out.push_back(entry.second);
    return Value(std::move(out));
  }
  if (name == "get") {
    const Value* key = args.find(0, "key");
    if (!key) return wrongArgs(name, "a key");
    const Value* hit = key->isString() ? d.find(key->asString()) : nullptr;
    if (hit) return *hit;
    const Value* fallback = args.find(1, "default");
    return fallback ? *fallback : Value::none();
  }
  return makeError("dict has no method '{}'", name);
}

bool isStringMethod(const std::string& name) {
  static const char* kNames[] = {"strip", "lstrip",  "rstrip", "split",   "startswith", "endswith", "upper",
                                 "lower", "title",   "capitalize", "replace", "find", "count", "join",
                                 "isdigit", "isspace", "isalpha", "isalnum"};
  for (const char* n : kNames)
    if (name == n) return true;
  return false;
}

bool isDictMethod(const std::string& name) {
  return name == "items" || name == "keys" || name == "values" || name == "get";
}

}  // namespace

Value methodOf(const Value& object, const std::string& name) {
  if (object.isString() && isStringMethod(name)) {
    std::string s = object.asString();
    return Value::function([s, name](const CallArgs& args) { return stringMethod(s, name, args); });
  }
  if (object.isDict() && isDictMethod(name)) {
    Value keep = object;
    return Value::function([keep, name](const CallArgs& args) { return dictMethod(keep.asDict(), name, args); });
  }
  return Value::undefined(fmt::format("'{}' object has no attribute '{}'", object.typeName(), name));
}

Value getAttribute(const Value& object, const std::string& name) {
  // jinja2 tries Python's getattr first (a dict's methods win over its
  // keys), then the item.
  Value method = methodOf(object, name);
  if (!method.isUndefined()) return method;
  if (object.isDict()) {
    if (const Value* v = object.asDict().find(name)) return *v;
    return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
  }
  if (object.isNamespace()) {
    if (const Value* v = object.namespaceAttributes().find(name)) return *v;
    return Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
  }
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", object.typeName(), name));
}

Result<Value> getItem(const Value& object, const Value& key) {
  if (object.isDict() || object.isNamespace()) {
    const Dict& d = object.isDict() ? object.asDict() : object.namespaceAttributes();
    if (key.isString()) {
      if (const Value* v = d.find(key.asString())) return *v;
      Value method = methodOf(object, key.asString());
      if (!method.isUndefined()) return method;
    }
    return Value::undefined(fmt::format("'dict object' has no attribute '{}'", toDisplayString(key)));
  }
  if ((object.isList() || object.isString()) && (key.isInt() || key.isBool())) {
    int64_t i = key.asInt();
    if (object.isList()) {
      const List& list = object.asList();
      if (i < 0) i += int64_t(list.size());
      if (i < 0 || i >= int64_t(list.size()))
        return Value::undefined(fmt::format("list object has no element {}", key.asInt()));
      return list[size_t(i)];
    }
    std::u32string s = decodeUtf8(object.asString());
    if (i < 0) i += int64_t(s.size());
    if (i < 0 || i >= int64_t(s.size()))
      return Value::undefined(fmt::format("str object has no element {}", key.asInt()));
    return Value(encodeUtf8(std::u32string_view(s).substr(size_t(i), 1)));
  }
  if (key.isString()) return getAttribute(object, key.asString());
  return Value::undefined(fmt::format("'{}' object has no element {}", object.typeName(), toRepr(key)));
}

Result<List> iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return List{};
    case Value::Kind::kList:
      return value.asList();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& entry : value.asDict().entries()) keys.push_back(Value(entry.first));
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (char32_t c : decodeUtf8(value.asString())) chars.push_back(Value(encodeUtf8(std::u32string_view(&c, 1))));
      return chars;
    }
    default:
      return makeError("'{}' object is not iterable", value.typeName());
  }
}

}  // namespace kiln::jinja
