// jinja2's filters that chat templates use, and transformers' tojson.
#include <cmath>

#include "runtime/chat/jinja/builtins.h"
#include "runtime/chat/jinja/json.h"
#include "runtime/chat/jinja/text.h"

namespace kiln::jinja {

namespace {

// The arguments after the filter's own: `select('equalto', 'x')` -> ['x'].
CallArgs shift(const CallArgs& args, size_t n) {
  CallArgs rest;
  for (size_t i = n; i < args.positional.size(); ++i) rest.positional.push_back(args.positional[i]);
  rest.keyword = args.keyword;
  return rest;
}

// item.a.b as jinja2's attribute getters read it (dict keys by name,
// list indices by number).
Result<Value> attributePath(const Value& item, const std::string& path) {
  Value v = item;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    Value key = !part.empty() && std::isdigit((unsigned char)part[0]) ? Value(int64_t(std::stoll(part))) : Value(part);
    auto next = getItem(v, key);
    if (!next.ok()) return next.error();
    v = next.take();
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return v;
}

Result<Value> selectOrReject(const Value& input, const CallArgs& args, bool by_attribute, bool keep) {
  auto items = iterate(input);
  if (!items.ok()) return items.error();
  size_t next_arg = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty() || !args.positional[0].isString())
      return makeError("selectattr/rejectattr need an attribute name");
    attribute = args.positional[0].asString();
    next_arg = 1;
  }
  const TestFn* test = nullptr;
  if (args.positional.size() > next_arg) {
    if (!args.positional[next_arg].isString()) return makeError("expected a test name");
    test = findTest(args.positional[next_arg].asString());
    if (!test) return makeError("no test named '{}'", args.positional[next_arg].asString());
  }
  CallArgs test_args = shift(args, next_arg + 1);
  List out;
  for (const Value& item : *items) {
    Value subject = item;
    if (by_attribute) {
      auto v = attributePath(item, attribute);
      if (!v.ok()) return v.error();
      subject = v.take();
    }
    bool pass;
    if (test) {
      auto r = (*test)(subject, test_args);
      if (!r.ok()) return r.error();
      pass = *r;
    } else {
      pass = subject.truthy();
    }
    if (pass == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

Result<Value> tojson(const Value& x, const CallArgs& args) {
  JsonFormat format;
  if (const Value* indent = args.find(0, "indent"); indent && !indent->isNone()) {
    format.pretty = true;
    format.indent = indent->isString() ? indent->asString()
                                       : std::string(size_t(std::max<int64_t>(0, indent->asInt())), ' ');
    format.item_separator.assign(1, ',');  // json.dumps with indent
  }
  if (const Value* seps = args.find(99, "separators"); seps && seps->isList() && seps->asList().size() == 2) {
    format.item_separator = toDisplayString(seps->asList()[0]);
    format.key_separator = toDisplayString(seps->asList()[1]);
  }
  if (const Value* sort = args.find(99, "sort_keys")) format.sort_keys = sort->truthy();
  if (const Value* ascii = args.find(99, "ensure_ascii")) format.ensure_ascii = ascii->truthy();
  auto text = toJson(x, format);
  if (!text.ok()) return text.error();
  return Value(text.take());
}

struct NamedFilter {
  const char* name;
  FilterFn fn;
};

const NamedFilter kFilters[] = {
    {"trim",
     [](const Value& x, const CallArgs& a) -> Result<Value> {
       const Value* chars = a.find(0, "chars");
       std::string s = x.isUndefined() ? std::string() : toDisplayString(x);
       return Value(pyStrip(s, chars && chars->isString() ? &chars->asString() : nullptr, StripSide::kBoth));
     }},
    {"length",
     [](const Value& x, const CallArgs&) -> Result<Value> {
       if (x.isString()) return Value(int64_t(decodeUtf8(x.asString()).size()));
       if (x.isList()) return Value(int64_t(x.asList().size()));
       if (x.isDict()) return Value(int64_t(x.asDict().size()));
       if (x.isUndefined()) return Value(int64_t(0));
       return makeError("object of type '{}' has no len()", x.typeName());
     }},
    {"count",
     [](const Value& x, const CallArgs& a) -> Result<Value> { return (*findFilter("length"))(x, a); }},
    {"tojson", tojson},
    {"string", [](const Value& x, const CallArgs&) -> Result<Value> { return Value(toDisplayString(x)); }},
    {"lower",
     [](const Value& x, const CallArgs&) -> Result<Value> { return Value(asciiLower(toDisplayString(x))); }},
    {"upper",
     [](const Value& x, const CallArgs&) -> Result<Value> { return Value(asciiUpper(toDisplayString(x))); }},
    {"capitalize",
     [](const Value& x, const CallArgs&) -> Result<Value> { return Value(pyCapitalize(toDisplayString(x))); }},
    {"title", [](const Value& x, const CallArgs&) -> Result<Value> { return Value(jinjaTitle(toDisplayString(x))); }},
    {"replace",
     [](const Value& x, const CallArgs& a) -> Result<Value> {
       const Value* from = a.find(0, "old");
       const Value* to = a.find(1, "new");
       const Value* count = a.find(2, "count");
       if (!from || !to) return makeError("replace needs the old and the new text");
       return Value(pyReplace(toDisplayString(x), toDisplayString(*from), toDisplayString(*to),
                              count && count->isInt() ? long(count->asInt()) : -1));
     }},
    {"join",
     [](const Value& x, const CallArgs& a) -> Result<Value> {
       auto items = iterate(x);
       if (!items.ok()) return items.error();
       const Value* sep = a.find(0, "d");
       const Value* attribute = a.find(1, "attribute");
       std::string out;
       for (size_t i = 0; i < items->size(); ++i) {
         if (i && sep) out += toDisplayString(*sep);
         Value item = (*items)[i];
         if (attribute) {
           auto v = attributePath(item, toDisplayString(*attribute));
           if (!v.ok()) return v.error();
           item = v.take();
         }
         out += toDisplayString(item);
       }
       return Value(std::move(out));
     }},
    {"first",
     [](const Value& x, const CallArgs&) -> Result<Value> {
       auto items = iterate(x);
       if (!items.ok()) return items.error();
       if (items->empty()) return Value::undefined("No first item, sequence was empty.");
       return items->front();
     }},
    {"last",
     [](const Value& x, const CallArgs&) -> Result<Value> {
       auto items = iterate(x);
       if (!items.ok()) return items.error();
       if (items->empty()) return Value::undefined("No last item, sequence was empty.");
       return items->back();
     }},
    {"default",
     [](const Value& x, const CallArgs& a) -> Result<Value> {
       const Value* fallback = a.find(0, "default_value");
       const Value* boolean = a.find(1, "boolean");
       bool use = x.isUndefined() || (boolean && boolean->truthy() && !x.truthy());
       if (!use) return x;
       return fallback ? *fallback : Value(std::string());
     }},
    {"d",
     [](const Value& x, const CallArgs& a) -> Result<Value> { return (*findFilter("default"))(x, a); }},
    {"items",
     [](const Value& x, const CallArgs&) -> Result<Value> {
       if (x.isUndefined()) return Value(List{});
       if (!x.isDict()) return makeError("can only get item pairs from a mapping, not a {}", x.typeName());
       List out;
       for (const auto& [key, value] : x.asDict().entries()) out.push_back(Value::tuple(List{Value(key), value}));
       return Value(std::move(out));
     }},
    {"list",
     [](const Value& x, const CallArgs&) -> Result<Value> {
       auto items = iterate(x);
       if (!items.ok()) return items.error();
       return Value(items.take());
     }},
    {"map",
     [](const Value& x, const CallArgs& a) -> Result<Value> {
       auto items = iterate(x);
       if (!items.ok()) return items.error();
       List out;
       if (const Value* attribute = a.find(99, "attribute")) {
         const Value* fallback = a.find(99, "default");
         for (const Value& item : *items) {
           auto v = attributePath(item, toDisplayString(*attribute));
           if (!v.ok()) return v.error();
           out.push_back(v->isUndefined() && fallback ? *fallback : v.take());
         }
         return Value(std::move(out));
       }
       if (a.positional.empty() || !a.positional[0].isString())
         return makeError("map needs a filter name or attribute=");
       const FilterFn* filter = findFilter(a.positional[0].asString());
       if (!filter) return makeError("no filter named '{}'", a.positional[0].asString());
       CallArgs rest = shift(a, 1);
       for (const Value& item : *items) {
         auto v = (*filter)(item, rest);
         if (!v.ok()) return v.error();
         out.push_back(v.take());
       }
       return Value(std::move(out));
     }},
    {"select", [](const Value& x, const CallArgs& a) { return selectOrReject(x, a, false, true); }},
    {"reject", [](const Value& x, const CallArgs& a) { return selectOrReject(x, a, false, false); }},
    {"selectattr", [](const Value& x, const CallArgs& a) { return selectOrReject(x, a, true, true); }},
    {"rejectattr", [](const Value& x, const CallArgs& a) { return selectOrReject(x, a, true, false); }},
    {"unique",
     [](const Value& x, const CallArgs&) -> Result<Value> {
       auto items = iterate(x);
       if (!items.ok()) return items.error();
       List out;
       for (const Value& item : *items) {
         bool seen = false;
         for (const Value& kept : out) seen |= equals(kept, item);
         if (!seen) out.push_back(item);
       }
       return Value(std::move(out));
     }},
    {"int",
     [](const Value& x, const CallArgs& a) -> Result<Value> {
       if (x.isNumber()) return Value(int64_t(x.isFloat() ? std::trunc(x.asFloat()) : x.asInt()));
       if (x.isString()) {
         char* end = nullptr;
         long long v = std::strtoll(x.asString().c_str(), &end, 10);
         if (end && *end == '\0' && !x.asString().empty()) return Value(int64_t(v));
       }
       const Value* fallback = a.find(0, "default");
       return fallback ? *fallback : Value(int64_t(0));
     }},
    {"float",
     [](const Value& x, const CallArgs& a) -> Result<Value> {
       if (x.isNumber()) return Value(x.asFloat());
       if (x.isString()) {
         char* end = nullptr;
         double v = std::strtod(x.asString().c_str(), &end);
         if (end && *end == '\0' && !x.asString().empty()) return Value(v);
       }
       const Value* fallback = a.find(0, "default");
       return fallback ? *fallback : Value(0.0);
     }},
    {"abs",
     [](const Value& x, const CallArgs&) -> Result<Value> {
       if (x.isFloat()) return Value(std::fabs(x.asFloat()));
       if (x.isNumber()) return Value(int64_t(std::llabs(x.asInt())));
       return makeError("bad operand type for abs(): '{}'", x.typeName());
     }},
    {"safe", [](const Value& x, const CallArgs&) -> Result<Value> { return x; }},
};

}  // namespace

const FilterFn* findFilter(std::string_view name) {
  for (const NamedFilter& f : kFilters)
    if (name == f.name) return &f.fn;
  return nullptr;
}

}  // namespace kiln::jinja
