// jinja2's filters that chat templates use, and transformers' tojson.
#include <algorithm>
#include <cmath>
#include <optional>

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

// An indent given as a count of spaces: 0 and below indent nothing, as in
// Python; more than kMaxIndent is refused (each nested line repeats it).
constexpr int64_t kMaxIndent = 1024;
Result<size_t> indentWidth(const Value& width, std::string_view filter) {
  const int64_t n = width.asInt();
  if (n > kMaxIndent) return makeError("{}: indent {} is wider than {} spaces", filter, n, kMaxIndent);
  return size_t(std::max<int64_t>(0, n));
}

Result<Value> tojson(const Value& x, const CallArgs& args) {
  // transformers' signature: tojson(x, ensure_ascii=False, indent=None,
  // separators=None, sort_keys=False).
  JsonFormat format;
  if (const Value* ascii = args.find(0, "ensure_ascii")) format.ensure_ascii = ascii->truthy();
  if (const Value* indent = args.find(1, "indent"); indent && !indent->isNone()) {
    format.pretty = true;
    if (indent->isString()) {
      format.indent = indent->asString();
    } else if (indent->isInt() || indent->isBool()) {
      auto width = indentWidth(*indent, "tojson");
      if (!width.ok()) return width.error();
      format.indent.assign(*width, ' ');
    } else {
      return makeError("tojson: indent must be an integer or a string, got {}", indent->typeName());
    }
    format.item_separator.assign(1, ',');  // json.dumps with indent
  }
  if (const Value* seps = args.find(2, "separators"); seps && seps->isList() && seps->asList().size() == 2) {
    format.item_separator = toDisplayString(seps->asList()[0]);
    format.key_separator = toDisplayString(seps->asList()[1]);
  }
  if (const Value* sort = args.find(3, "sort_keys")) format.sort_keys = sort->truthy();
  auto text = toJson(x, format);
  if (!text.ok()) return text.error();
  return Value(text.take());
}

// Sort key comparison as jinja2's sort/dictsort/max/min: strings compared
// case-insensitively unless asked otherwise.
Result<bool> sortLess(const Value& a, const Value& b, bool case_sensitive) {
  if (!case_sensitive && a.isString() && b.isString()) return asciiLower(a.asString()) < asciiLower(b.asString());
  return lessThan(a, b);
}

bool flag(const CallArgs& args, size_t index, std::string_view name) {
  const Value* v = args.find(index, name);
  return v && v->truthy();
}

// The items of `x`, each with the key it is ordered by (the item itself or
// its `attribute`), sorted stably.
Result<List> sortedItems(const Value& x, const CallArgs& args, size_t case_index, const Value* attribute,
                         bool reverse) {
  auto items = iterate(x);
  if (!items.ok()) return items.error();
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : *items) {
    Value key = item;
    if (attribute) {
      auto k = attributePath(item, toDisplayString(*attribute));
      if (!k.ok()) return k.error();
      key = k.take();
    }
    keyed.emplace_back(std::move(key), item);
  }
  const bool case_sensitive = flag(args, case_index, "case_sensitive");
  std::optional<Error> failure;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    auto less = reverse ? sortLess(b.first, a.first, case_sensitive) : sortLess(a.first, b.first, case_sensitive);
    if (!less.ok()) {
      failure = less.error();
      return false;
    }
    return *less;
  });
  if (failure) return *failure;
  List out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return out;
}

// Python's max/min: the first of the items that compare highest / lowest.
Result<Value> extreme(const Value& x, const CallArgs& args, bool want_max) {
  auto items = iterate(x);
  if (!items.ok()) return items.error();
  if (items->empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const Value* attribute = args.find(1, "attribute");
  const bool case_sensitive = flag(args, 0, "case_sensitive");
  const Value* best = nullptr;
  Value best_key;
  for (const Value& item : *items) {
    Value key = item;
    if (attribute) {
      auto k = attributePath(item, toDisplayString(*attribute));
      if (!k.ok()) return k.error();
      key = k.take();
    }
    if (best) {
      auto better = want_max ? sortLess(best_key, key, case_sensitive) : sortLess(key, best_key, case_sensitive);
      if (!better.ok()) return better.error();
      if (!*better) continue;
    }
    best = &item;
    best_key = key;
  }
  return *best;
}

}  // namespace

Result<Value> formatPercent(const std::string& format, const List& values) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (i + 1 >= format.size()) return makeError("incomplete format");
    char spec = format[++i];
    if (spec == '%') {
      out += '%';
      continue;
    }
    if (next >= values.size()) return makeError("not enough arguments for format string");
    const Value& v = values[next++];
    switch (spec) {
      case 's':
        out += toDisplayString(v);
        break;
      case 'r':
        out += toRepr(v);
        break;
      case 'd':
      case 'i':
        if (!v.isNumber()) return makeError("%{} format: a real number is required, not {}", spec, v.typeName());
        out += std::to_string(v.isFloat() ? int64_t(std::trunc(v.asFloat())) : v.asInt());
        break;
      default:
        return makeError("unsupported format character '{}' (kiln's Jinja subset: %s %r %d %i %%)", spec);
    }
  }
  if (next < values.size()) return makeError("not all arguments converted during string formatting");
  return Value(std::move(out));
}

namespace {

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
       if (const Value* attribute = a.keywordArg("attribute")) {
         const Value* fallback = a.keywordArg("default");
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
       if (x.isNumber()) return x.asInt() < 0 ? intArithmetic("-", 0, x.asInt()) : Value(x.asInt());
       return makeError("bad operand type for abs(): '{}'", x.typeName());
     }},
    {"safe", [](const Value& x, const CallArgs&) -> Result<Value> { return x; }},
    {"sort",
     [](const Value& x, const CallArgs& a) -> Result<Value> {
       auto sorted = sortedItems(x, a, 1, a.find(2, "attribute"), flag(a, 0, "reverse"));
       if (!sorted.ok()) return sorted.error();
       return Value(sorted.take());
     }},
    {"dictsort",
     [](const Value& x, const CallArgs& a) -> Result<Value> {
       if (!x.isDict()) return makeError("dictsort needs a mapping, not a {}", x.typeName());
       const Value* by = a.find(1, "by");
       const bool by_value = by && by->isString() && by->asString() == "value";
       List pairs;
       for (const auto& [key, value] : x.asDict().entries()) pairs.push_back(Value::tuple(List{Value(key), value}));
       CallArgs sort_args;
       sort_args.keyword.emplace_back("case_sensitive", Value(flag(a, 0, "case_sensitive")));
       Value attribute(by_value ? "1" : "0");
       auto sorted = sortedItems(Value(std::move(pairs)), sort_args, 99, &attribute, flag(a, 2, "reverse"));
       if (!sorted.ok()) return sorted.error();
       return Value(sorted.take());
     }},
    {"max", [](const Value& x, const CallArgs& a) { return extreme(x, a, true); }},
    {"min", [](const Value& x, const CallArgs& a) { return extreme(x, a, false); }},
    {"sum",
     [](const Value& x, const CallArgs& a) -> Result<Value> {
       auto items = iterate(x);
       if (!items.ok()) return items.error();
       const Value* attribute = a.find(0, "attribute");
       const Value* start = a.find(1, "start");
       Value total = start ? *start : Value(int64_t(0));
       for (const Value& item : *items) {
         Value v = item;
         if (attribute) {
           auto k = attributePath(item, toDisplayString(*attribute));
           if (!k.ok()) return k.error();
           v = k.take();
         }
         if (!v.isNumber() || !total.isNumber())
           return makeError("unsupported operand type(s) for +: '{}' and '{}'", total.typeName(), v.typeName());
         if (total.isFloat() || v.isFloat()) {
           total = Value(total.asFloat() + v.asFloat());
         } else {
           auto sum = intArithmetic("+", total.asInt(), v.asInt());
           if (!sum.ok()) return sum.error();
           total = sum.take();
         }
       }
       return total;
     }},
    {"round",
     [](const Value& x, const CallArgs& a) -> Result<Value> {
       if (!x.isNumber()) return makeError("round needs a number, not {}", x.typeName());
       const Value* precision = a.find(0, "precision");
       const Value* method = a.find(1, "method");
       const std::string how = method && method->isString() ? method->asString() : "common";
       const double scale = std::pow(10.0, double(precision && precision->isInt() ? precision->asInt() : 0));
       // round(7) stays an int, as Python's round of an int.
       if (how == "common" && !x.isFloat()) return Value(x.asInt());
       const double v = x.asFloat() * scale;
       // Python's round() ties to even, as nearbyint does.
       double r = how == "floor" ? std::floor(v) : how == "ceil" ? std::ceil(v) : std::nearbyint(v);
       if (how != "common" && how != "floor" && how != "ceil")
         return makeError("method must be common, ceil or floor");
       return Value(r / scale);
     }},
    {"indent",
     [](const Value& x, const CallArgs& a) -> Result<Value> {
       const Value* width = a.find(0, "width");
       size_t spaces = 4;
       if (width && width->isInt()) {
         auto w = indentWidth(*width, "indent");
         if (!w.ok()) return w.error();
         spaces = *w;
       }
       std::string indention = width && width->isString() ? width->asString() : std::string(spaces, ' ');
       const bool first = flag(a, 1, "first"), blank = flag(a, 2, "blank");
       // jinja2 splits the text into lines (a trailing newline ends the last
       // one) and indents every line after the first, blank ones only if asked.
       std::vector<std::string> lines;
       std::string text = toDisplayString(x) + "\n";
       size_t pos = 0;
       while (pos < text.size()) {
         size_t nl = text.find('\n', pos);
         lines.push_back(text.substr(pos, nl - pos));
         pos = nl + 1;
       }
       std::string out = lines.empty() ? std::string() : lines[0];
       for (size_t i = 1; i < lines.size(); ++i) {
         out += '\n';
         if (blank || !lines[i].empty()) out += indention;
         out += lines[i];
       }
       return Value(first ? indention + out : out);
     }},
    {"format",
     [](const Value& x, const CallArgs& a) -> Result<Value> {
       if (!x.isString()) return makeError("format needs a format string, not {}", x.typeName());
       return formatPercent(x.asString(), a.positional);
     }},
};

}  // namespace

const FilterFn* findFilter(std::string_view name) {
  for (const NamedFilter& f : kFilters)
    if (name == f.name) return &f.fn;
  return nullptr;
}

}  // namespace kiln::jinja
