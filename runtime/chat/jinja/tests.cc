// jinja2's tests: `x is name(args)`.
#include <cctype>
#include <cmath>

#include "runtime/chat/jinja/builtins.h"

namespace kiln::jinja {

namespace {

Result<const Value*> argument(const CallArgs& args, std::string_view test) {
  const Value* v = args.find(0, "other");
  if (!v) return makeError("test '{}' needs an argument", test);
  return v;
}

Result<bool> compareTest(const Value& x, const CallArgs& args, std::string_view op) {
  auto other = argument(args, op);
  if (!other.ok()) return other.error();
  const Value& y = **other;
  if (op == "==") return equals(x, y);
  if (op == "!=") return !equals(x, y);
  if (op == "<") return lessThan(x, y);
  if (op == ">") return lessThan(y, x);
  auto less = lessThan(op == "<=" ? y : x, op == "<=" ? x : y);
  if (!less.ok()) return less.error();
  return !*less;  // <= is not(y < x), >= is not(x < y)
}

struct NamedTest {
  const char* name;
  TestFn fn;
};

const NamedTest kTests[] = {
    {"defined", [](const Value& x, const CallArgs&) -> Result<bool> { return !x.isUndefined(); }},
    {"undefined", [](const Value& x, const CallArgs&) -> Result<bool> { return x.isUndefined(); }},
    {"none", [](const Value& x, const CallArgs&) -> Result<bool> { return x.isNone(); }},
    {"string", [](const Value& x, const CallArgs&) -> Result<bool> { return x.isString(); }},
    // Python's bool is a Number and an int; jinja2's integer test excludes it.
    {"number", [](const Value& x, const CallArgs&) -> Result<bool> { return x.isNumber(); }},
    {"integer", [](const Value& x, const CallArgs&) -> Result<bool> { return x.isInt(); }},
    {"float", [](const Value& x, const CallArgs&) -> Result<bool> { return x.isFloat(); }},
    {"boolean", [](const Value& x, const CallArgs&) -> Result<bool> { return x.isBool(); }},
    {"true", [](const Value& x, const CallArgs&) -> Result<bool> { return x.isBool() && x.asBool(); }},
    {"false", [](const Value& x, const CallArgs&) -> Result<bool> { return x.isBool() && !x.asBool(); }},
    {"mapping", [](const Value& x, const CallArgs&) -> Result<bool> { return x.isDict(); }},
    // Undefined iterates (as empty) in jinja2, so it is iterable too.
    {"iterable",
     [](const Value& x, const CallArgs&) -> Result<bool> {
       return x.isString() || x.isList() || x.isDict() || x.isUndefined();
     }},
    {"sequence",
     [](const Value& x, const CallArgs&) -> Result<bool> {
       return x.isString() || x.isList() || x.isDict() || x.isUndefined();
     }},
    {"callable", [](const Value& x, const CallArgs&) -> Result<bool> { return x.isFunction(); }},
    {"equalto", [](const Value& x, const CallArgs& a) { return compareTest(x, a, "=="); }},
    {"eq", [](const Value& x, const CallArgs& a) { return compareTest(x, a, "=="); }},
    {"==", [](const Value& x, const CallArgs& a) { return compareTest(x, a, "=="); }},
    {"ne", [](const Value& x, const CallArgs& a) { return compareTest(x, a, "!="); }},
    {"!=", [](const Value& x, const CallArgs& a) { return compareTest(x, a, "!="); }},
    {"lt", [](const Value& x, const CallArgs& a) { return compareTest(x, a, "<"); }},
    {"lessthan", [](const Value& x, const CallArgs& a) { return compareTest(x, a, "<"); }},
    {"gt", [](const Value& x, const CallArgs& a) { return compareTest(x, a, ">"); }},
    {"greaterthan", [](const Value& x, const CallArgs& a) { return compareTest(x, a, ">"); }},
    {"le", [](const Value& x, const CallArgs& a) { return compareTest(x, a, "<="); }},
    {"ge", [](const Value& x, const CallArgs& a) { return compareTest(x, a, ">="); }},
    {"sameas",
     [](const Value& x, const CallArgs& a) -> Result<bool> {
       auto other = argument(a, "sameas");
       if (!other.ok()) return other.error();
       const Value& y = **other;
       // `is` identity holds for the singletons templates compare with.
       if (x.isNone() || y.isNone()) return x.isNone() && y.isNone();
       if (x.isBool() || y.isBool()) return x.isBool() && y.isBool() && x.asBool() == y.asBool();
       return equals(x, y);
     }},
    {"in",
     [](const Value& x, const CallArgs& a) -> Result<bool> {
       auto other = argument(a, "in");
       if (!other.ok()) return other.error();
       const Value& y = **other;
       if (y.isString() && x.isString()) return y.asString().find(x.asString()) != std::string::npos;
       if (y.isDict()) return x.isString() && y.asDict().find(x.asString()) != nullptr;
       if (y.isList()) {
         for (const Value& item : y.asList())
           if (equals(item, x)) return true;
         return false;
       }
       return makeError("argument of type '{}' is not iterable", y.typeName());
     }},
    {"odd",
     [](const Value& x, const CallArgs&) -> Result<bool> {
       if (!x.isInt()) return makeError("test 'odd' needs an int, got {}", x.typeName());
       return x.asInt() % 2 != 0;
     }},
    {"even",
     [](const Value& x, const CallArgs&) -> Result<bool> {
       if (!x.isInt()) return makeError("test 'even' needs an int, got {}", x.typeName());
       return x.asInt() % 2 == 0;
     }},
    {"divisibleby",
     [](const Value& x, const CallArgs& a) -> Result<bool> {
       const Value* n = a.find(0, "num");
       if (!x.isInt() || !n || !n->isInt() || n->asInt() == 0)
         return makeError("test 'divisibleby' needs two ints, the second not 0");
       return n->asInt() == -1 || x.asInt() % n->asInt() == 0;  // INT64_MIN % -1 overflows
     }},
    {"lower",
     [](const Value& x, const CallArgs&) -> Result<bool> {
       if (!x.isString()) return false;
       bool cased = false;
       for (unsigned char c : x.asString()) {
         if (std::isupper(c)) return false;
         cased |= std::islower(c) != 0;
       }
       return cased;
     }},
    {"upper",
     [](const Value& x, const CallArgs&) -> Result<bool> {
       if (!x.isString()) return false;
       bool cased = false;
       for (unsigned char c : x.asString()) {
         if (std::islower(c)) return false;
         cased |= std::isupper(c) != 0;
       }
       return cased;
     }},
};

}  // namespace

const TestFn* findTest(std::string_view name) {
  for (const NamedTest& t : kTests)
    if (name == t.name) return &t.fn;
  return nullptr;
}

}  // namespace kiln::jinja
