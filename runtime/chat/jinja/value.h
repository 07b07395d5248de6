// The values a chat template computes with: the Python objects jinja2
// hands a template (None, bool, int, float, str, list, dict) plus
// jinja2's Undefined, namespace() objects and callables. Lists and dicts
// are immutable once built (transformers renders in jinja2's immutable
// sandbox), so copies share them; a namespace is the one mutable object.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "runtime/support/error.h"

namespace kiln::jinja {

class Value;
class Dict;
using List = std::vector<Value>;

// Arguments of a call, filter or test after the input: f(a, b, key=c).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` or named `name`; Undefined when absent.
  const Value* find(size_t index, std::string_view name) const;
  // The keyword argument `name` only; nullptr when absent.
  const Value* keywordArg(std::string_view name) const;
};

using Function = std::function<Result<Value>(const CallArgs&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

  // Undefined; `hint` is jinja2's message when it is used ("'x' is undefined").
  Value() = default;
  static Value undefined(std::string hint);
  static Value none();
  Value(bool b) : data_(b) {}
  Value(int v) : data_(int64_t(v)) {}
  Value(int64_t v) : data_(v) {}
  Value(double v) : data_(v) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(List list);
  Value(Dict dict);
  // A Python tuple: a list that prints as (a, b) (dict items, `a, b`).
  static Value tuple(List items);
  static Value makeNamespace(Dict attributes);
  static Value function(Function fn);

  Kind kind() const { return Kind(data_.index()); }
  bool isUndefined() const { return kind() == Kind::kUndefined; }
  bool isNone() const { return kind() == Kind::kNone; }
  bool isBool() const { return kind() == Kind::kBool; }
  bool isInt() const { return kind() == Kind::kInt; }
  bool isFloat() const { return kind() == Kind::kFloat; }
  bool isNumber() const { return isInt() || isFloat() || isBool(); }
  bool isString() const { return kind() == Kind::kString; }
  bool isList() const { return kind() == Kind::kList; }
  bool isTuple() const { return isList() && tuple_; }
  bool isDict() const { return kind() == Kind::kDict; }
  bool isNamespace() const { return kind() == Kind::kNamespace; }
  bool isFunction() const { return kind() == Kind::kFunction; }

  bool asBool() const { return std::get<bool>(data_); }
  int64_t asInt() const { return isBool() ? int64_t(asBool()) : std::get<int64_t>(data_); }
  double asFloat() const { return isFloat() ? std::get<double>(data_) : double(asInt()); }
  const std::string& asString() const { return std::get<std::string>(data_); }
  const List& asList() const { return *std::get<std::shared_ptr<const List>>(data_); }
  const Dict& asDict() const { return *std::get<std::shared_ptr<const Dict>>(data_); }
  Dict& namespaceAttributes() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  const Function& asFunction() const { return *std::get<std::shared_ptr<const Function>>(data_); }
  const std::string& undefinedHint() const { return std::get<Undefined>(data_).hint; }

  // Python's bool(x); Undefined is false.
  bool truthy() const;
  // Python's type name as jinja2's errors spell it ("str", "list", "dict").
  std::string_view typeName() const;

 private:
  struct Undefined {
    std::string hint;
  };
  struct None {};
  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<const List>,
               std::shared_ptr<const Dict>, std::shared_ptr<Dict>, std::shared_ptr<const Function>>
      data_;
  bool tuple_ = false;
};

// A dict with string keys in insertion order, as Python keeps them (and as
// json.dumps writes them back).
class Dict {
 public:
  using Entry = std::pair<std::string, Value>;
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
  const std::vector<Entry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<Entry> entries_;
};

// str(x) as jinja2 prints {{ x }}: None -> "None", lists and dicts as
// Python's repr of them, Undefined -> "".
std::string toDisplayString(const Value& v);
// Python's repr(x) ('text' quoted as Python quotes it).
std::string toRepr(const Value& v);
// Python's ==, deep over lists and dicts; 1 == 1.0 == True.
bool equals(const Value& a, const Value& b);
// Python's <, for numbers, strings and lists; fails for other pairs.
Result<bool> lessThan(const Value& a, const Value& b);

// Python's repr of a float: the shortest digits that read back the same.
std::string formatFloat(double v);

// UTF-8 <-> code points, for str indexing, slicing and len().
std::u32string decodeUtf8(std::string_view text);
std::string encodeUtf8(std::u32string_view text);

}  // namespace kiln::jinja
