// What a template can call by name: jinja2's filters and tests (the ones
// chat templates use), Python's str and dict methods, and attribute and
// item lookup with jinja2's rules (x.key falls back to x['key'], a missing
// one is Undefined).
#pragma once

#include <string>
#include <string_view>

#include "runtime/chat/jinja/value.h"

namespace kiln::jinja {

// x | name(args)
using FilterFn = Result<Value> (*)(const Value& input, const CallArgs& args);
// x is name(args)
using TestFn = Result<bool> (*)(const Value& input, const CallArgs& args);

// nullptr when jinja2 (or transformers) has no such filter / test here.
const FilterFn* findFilter(std::string_view name);
const TestFn* findTest(std::string_view name);

// obj.name: a dict's key, a namespace's attribute, or a bound method of a
// str, dict or list; Undefined (with jinja2's message) when there is none.
Value getAttribute(const Value& object, const std::string& name);
// obj[key]: list index (negative from the end), dict key, str character.
Result<Value> getItem(const Value& object, const Value& key);
// The bound method name of a str / dict / list, or Undefined.
Value methodOf(const Value& object, const std::string& name);

// Python's printf-style "%s %d" % values (%s %r %d %i %%), for the format
// filter and str % args.
Result<Value> formatPercent(const std::string& format, const List& values);

// x op y on ints for op + - * ** // % (** with y >= 0), as Python computes
// them (floored division), failing where the result leaves int64 or y is a
// zero divisor.
Result<Value> intArithmetic(std::string_view op, int64_t x, int64_t y);

// Iterating: a list's items, a dict's keys, a str's characters; fails for
// other values (Undefined iterates as empty, as in jinja2).
Result<List> iterate(const Value& value);

}  // namespace kiln::jinja
