#include "runtime/chat/jinja/renderer.h"

#include <cmath>
#include <unordered_map>

#include "runtime/chat/jinja/builtins.h"

namespace kiln::jinja {

namespace {

Error at(SourceLoc loc, const std::string& what) {
  return makeError("line {} column {}: {}", loc.line, loc.column, what);
}

// Python's slice.indices(length): clamps start/stop for the step's sign.
struct SliceRange {
  int64_t start, stop, step;
};

Result<SliceRange> sliceIndices(const Value& start, const Value& stop, const Value& step, int64_t length) {
  SliceRange r{0, 0, 1};
  for (const Value* v : {&start, &stop, &step})
    if (!v->isNone() && !v->isUndefined() && !v->isInt() && !v->isBool())
      return makeError("slice indices must be integers or None");
  if (!step.isNone() && !step.isUndefined()) r.step = step.asInt();
  if (r.step == 0) return makeError("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t fallback) {
    if (v.isNone() || v.isUndefined()) return fallback;
    int64_t i = v.asInt();
    if (i < 0) {
      i += length;
      if (i < 0) i = r.step < 0 ? -1 : 0;
    } else if (i >= length) {
      i = r.step < 0 ? length - 1 : length;
    }
    return i;
  };
  r.start = clamp(start, r.step < 0 ? length - 1 : 0);
  r.stop = clamp(stop, r.step < 0 ? -1 : length);
  return r;
}

template <typename Seq>
Seq applySlice(const Seq& seq, const SliceRange& r) {
  Seq out;
  if (r.step > 0) {
    for (int64_t i = r.start; i < r.stop; i += r.step) out.push_back(seq[size_t(i)]);
  } else {
    for (int64_t i = r.start; i > r.stop; i += r.step) out.push_back(seq[size_t(i)]);
  }
  return out;
}

Error badOperands(const std::string& op, const Value& a, const Value& b) {
  return makeError("unsupported operand type(s) for {}: '{}' and '{}'", op, a.typeName(), b.typeName());
}

Result<Value> arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.isUndefined()) return makeError("{}", a.undefinedHint());
  if (b.isUndefined()) return makeError("{}", b.undefinedHint());
  if (op == "%" && a.isString()) return formatPercent(a.asString(), b.isTuple() ? b.asList() : List{b});
  if (op == "+") {
    if (a.isString() && b.isString()) return Value(a.asString() + b.asString());
    if (a.isList() && b.isList()) {
      List out = a.asList();
      for (const Value& v : b.asList()) out.push_back(v);
      return Value(std::move(out));
    }
  }
  if (op == "*") {
    const Value* seq = a.isString() || a.isList() ? &a : b.isString() || b.isList() ? &b : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (seq && count->isNumber() && !count->isFloat()) {
      int64_t n = std::max<int64_t>(0, count->asInt());
      const size_t unit = seq->isString() ? seq->asString().size() : seq->asList().size();
      if (unit != 0 && uint64_t(n) > (uint64_t(1) << 26) / unit)
        return makeError("repeating a {} {} times is larger than a prompt can be", seq->typeName(), n);
      if (seq->isString()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq->asString();
        return Value(std::move(out));
      }
      List out;
      for (int64_t i = 0; i < n; ++i)
        for (const Value& v : seq->asList()) out.push_back(v);
      return Value(std::move(out));
    }
  }
  if (!a.isNumber() || !b.isNumber()) return badOperands(op, a, b);
  const bool real = a.isFloat() || b.isFloat();
  if (op == "/") {
    if (b.asFloat() == 0) return makeError("division by zero");
    return Value(a.asFloat() / b.asFloat());
  }
  if (real) {
    double x = a.asFloat(), y = b.asFloat();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "**") return Value(std::pow(x, y));
    if (y == 0) return makeError("float division by zero");
    if (op == "//") return Value(std::floor(x / y));
    if (op == "%") {
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
  } else {
    int64_t x = a.asInt(), y = b.asInt();
    if (op == "**" && y < 0) return Value(std::pow(double(x), double(y)));
    if (op == "+" || op == "-" || op == "*" || op == "**" || op == "//" || op == "%")
      return intArithmetic(op, x, y);
  }
  return badOperands(op, a, b);
}

Result<bool> contains(const Value& container, const Value& item) {
  if (container.isString()) {
    if (!item.isString())
      return makeError("'in <string>' requires string as left operand, not {}", item.typeName());
    return container.asString().find(item.asString()) != std::string::npos;
  }
  if (container.isList()) {
    for (const Value& v : container.asList())
      if (equals(v, item)) return true;
    return false;
  }
  if (container.isDict()) return item.isString() && container.asDict().find(item.asString()) != nullptr;
  if (container.isUndefined()) return false;  // Undefined iterates as empty
  return makeError("argument of type '{}' is not iterable", container.typeName());
}

class Renderer {
 public:
  Renderer(const Dict& variables, const RenderOptions& options) : options_(options) {
    scopes_.emplace_back();
    installGlobals();
    for (const auto& [key, value] : variables.entries()) scopes_.back()[key] = value;
    scopes_.emplace_back();  // the template's own top-level assignments
  }

  Result<std::string> run(const Body& body) {
    std::string out;
    auto flow = exec(body, out);
    if (!flow.ok()) return flow.error();
    return out;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Scope = std::unordered_map<std::string, Value>;

  // --- globals ----------------------------------------------------------------
  void installGlobals() {
    Scope& g = scopes_.back();
    g["raise_exception"] = Value::function([](const CallArgs& args) -> Result<Value> {
      const Value* message = args.find(0, "message");
      return Error{message ? toDisplayString(*message) : std::string("raise_exception()")};
    });
    g["strftime_now"] = Value::function([this](const CallArgs& args) -> Result<Value> {
      const Value* format = args.find(0, "format");
      if (!format || !format->isString()) return makeError("strftime_now() takes a format string");
      std::time_t now = options_.now ? *options_.now : std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buf[256];
      size_t n = std::strftime(buf, sizeof buf, format->asString().c_str(), &local);
      return Value(std::string(buf, n));
    });
    g["namespace"] = Value::function([](const CallArgs& args) -> Result<Value> {
      Dict attributes;
      for (const Value& p : args.positional) {
        if (!p.isDict()) return makeError("namespace() takes keyword arguments or a dict");
        for (const auto& [key, value] : p.asDict().entries()) attributes.set(key, value);
      }
      for (const auto& [key, value] : args.keyword) attributes.set(key, value);
      return Value::makeNamespace(std::move(attributes));
    });
    g["dict"] = Value::function([](const CallArgs& args) -> Result<Value> {
      Dict d;
      for (const Value& p : args.positional) {
        if (!p.isDict()) return makeError("dict() takes keyword arguments or a dict");
        for (const auto& [key, value] : p.asDict().entries()) d.set(key, value);
      }
      for (const auto& [key, value] : args.keyword) d.set(key, value);
      return Value(std::move(d));
    });
    g["range"] = Value::function([](const CallArgs& args) -> Result<Value> {
      std::vector<int64_t> n;
      for (const Value& p : args.positional) {
        if (!p.isInt() && !p.isBool()) return makeError("range() takes integers");
        n.push_back(p.asInt());
      }
      if (n.empty() || n.size() > 3) return makeError("range() takes 1 to 3 integers");
      int64_t start = n.size() == 1 ? 0 : n[0], stop = n.size() == 1 ? n[0] : n[1], step = n.size() == 3 ? n[2] : 1;
      if (step == 0) return makeError("range() arg 3 must not be zero");
      List out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        if (out.size() > 100000) return makeError("range() is too long for a template");
        out.push_back(Value(i));
        if (__builtin_add_overflow(i, step, &i)) break;  // past int64: past stop too
      }
      return Value(std::move(out));
    });
  }

  // --- variables --------------------------------------------------------------
  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto hit = it->find(name);
      if (hit != it->end()) return hit->second;
    }
    return Value::undefined(fmt::format("'{}' is undefined", name));
  }

  Status bind(const std::vector<std::string>& targets, const Value& value, SourceLoc loc) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = value;
      return Status::success();
    }
    if (!value.isList() || value.asList().size() != targets.size())
      return at(loc, fmt::format("cannot unpack {} into {} names", toRepr(value), targets.size()));
    for (size_t i = 0; i < targets.size(); ++i) scopes_.back()[targets[i]] = value.asList()[i];
    return Status::success();
  }

  // --- statements -------------------------------------------------------------
  Result<Flow> exec(const Body& body, std::string& out) {
    for (const NodePtr& node : body) {
      auto flow = execNode(*node, out);
      if (!flow.ok() || *flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Result<Flow> execNode(const Node& node, std::string& out) {
    switch (node.kind) {
      case NodeKind::kText:
        out += node.text;
        return Flow::kNormal;
      case NodeKind::kOutput: {
        auto v = eval(*node.expr);
        if (!v.ok()) return v.error();
        out += toDisplayString(*v);
        return Flow::kNormal;
      }
      case NodeKind::kIf: {
        auto cond = eval(*node.condition);
        if (!cond.ok()) return cond.error();
        return exec(cond->truthy() ? node.body : node.else_body, out);
      }
      case NodeKind::kFor:
        return execFor(node, out);
      case NodeKind::kSet: {
        auto v = eval(*node.expr);
        if (!v.ok()) return v.error();
        if (node.attribute) {
          Value ns = lookup(node.targets[0]);
          if (!ns.isNamespace())
            return at(node.loc, fmt::format("cannot assign attribute on non-namespace object '{}'", node.targets[0]));
          ns.namespaceAttributes().set(node.targets[1], v.take());
          return Flow::kNormal;
        }
        KILN_RETURN_IF_ERROR(bind(node.targets, *v, node.loc));
        return Flow::kNormal;
      }
      case NodeKind::kSetBlock: {
        std::string captured;
        auto flow = exec(node.body, captured);
        if (!flow.ok()) return flow;
        scopes_.back()[node.targets[0]] = Value(std::move(captured));
        return Flow::kNormal;
      }
      case NodeKind::kMacro:
        scopes_.back()[node.text] = makeMacro(node);
        return Flow::kNormal;
      case NodeKind::kBreak:
        return Flow::kBreak;
      case NodeKind::kContinue:
        return Flow::kContinue;
      case NodeKind::kScope:
        return exec(node.body, out);
    }
    return Flow::kNormal;
  }

  Result<Flow> execFor(const Node& node, std::string& out) {
    auto iterable = eval(*node.expr);
    if (!iterable.ok()) return iterable.error();
    auto all = iterate(*iterable);
    if (!all.ok()) return at(node.expr->loc, all.error().message);
    List items;
    if (node.condition) {  // jinja2 filters first: loop.* counts the kept items
      for (const Value& item : *all) {
        scopes_.emplace_back();
        Status bound = bind(node.targets, item, node.loc);
        Result<Value> keep = bound.ok() ? eval(*node.condition) : Result<Value>(bound.error());
        scopes_.pop_back();
        if (!keep.ok()) return keep.error();
        if (keep->truthy()) items.push_back(item);
      }
    } else {
      items = all.take();
    }
    if (items.empty()) {
      scopes_.emplace_back();
      auto flow = exec(node.else_body, out);
      scopes_.pop_back();
      return flow.ok() ? Result<Flow>(Flow::kNormal) : flow;
    }
    const int64_t n = int64_t(items.size());
    for (int64_t i = 0; i < n; ++i) {
      Dict loop;
      loop.set("index0", Value(i));
      loop.set("index", Value(i + 1));
      loop.set("revindex0", Value(n - i - 1));
      loop.set("revindex", Value(n - i));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == n - 1));
      loop.set("length", Value(n));
      if (i > 0) loop.set("previtem", items[size_t(i - 1)]);
      if (i + 1 < n) loop.set("nextitem", items[size_t(i + 1)]);
      loop.set("cycle", Value::function([i](const CallArgs& args) -> Result<Value> {
        if (args.positional.empty()) return makeError("no items for cycling given");
        return args.positional[size_t(i) % args.positional.size()];
      }));
      scopes_.emplace_back();
      scopes_.back()["loop"] = Value(std::move(loop));
      Status bound = bind(node.targets, items[size_t(i)], node.loc);
      Result<Flow> flow = bound.ok() ? exec(node.body, out) : Result<Flow>(bound.error());
      scopes_.pop_back();
      if (!flow.ok()) return flow;
      if (*flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  // A macro is a function of its parameters rendering its body; it sees
  // the variables of where it is called.
  Value makeMacro(const Node& node) {
    const Node* macro = &node;
    return Value::function([this, macro](const CallArgs& args) -> Result<Value> {
      if (++depth_ > 100) {
        --depth_;
        return at(macro->loc, "macro '" + macro->text + "' recurses too deeply");
      }
      scopes_.emplace_back();
      for (size_t i = 0; i < macro->targets.size(); ++i) {
        const Value* given = args.find(i, macro->targets[i]);
        Value v = Value::undefined(fmt::format("'{}' is undefined", macro->targets[i]));
        if (given) {
          v = *given;
        } else if (macro->defaults[i]) {
          auto d = eval(*macro->defaults[i]);
          if (!d.ok()) {
            scopes_.pop_back();
            --depth_;
            return d.error();
          }
          v = d.take();
        }
        scopes_.back()[macro->targets[i]] = v;
      }
      std::string out;
      auto flow = exec(macro->body, out);
      scopes_.pop_back();
      --depth_;
      if (!flow.ok()) return flow.error();
      return Value(std::move(out));
    });
  }

  // --- expressions ------------------------------------------------------------
  Result<CallArgs> evalArgs(const Expr& e, size_t first) {
    CallArgs args;
    const size_t positional_end = e.items.size() - e.keywords.size();
    for (size_t i = first; i < e.items.size(); ++i) {
      auto v = eval(*e.items[i]);
      if (!v.ok()) return v.error();
      if (i < positional_end)
        args.positional.push_back(v.take());
      else
        args.keyword.emplace_back(e.keywords[i - positional_end], v.take());
    }
    return args;
  }

  Result<Value> eval(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.literal;
      case ExprKind::kName:
        return lookup(e.name);
      case ExprKind::kList: {
        List list;
        for (const ExprPtr& item : e.items) {
          auto v = eval(*item);
          if (!v.ok()) return v;
          list.push_back(v.take());
        }
        return e.name == "tuple" ? Value::tuple(std::move(list)) : Value(std::move(list));
      }
      case ExprKind::kDict: {
        Dict dict;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          auto key = eval(*e.items[i]);
          if (!key.ok()) return key;
          if (!key->isString()) return at(e.items[i]->loc, "kiln's dict literals take string keys");
          auto value = eval(*e.items[i + 1]);
          if (!value.ok()) return value;
          dict.set(key->asString(), value.take());
        }
        return Value(std::move(dict));
      }
      case ExprKind::kAttribute: {
        auto object = eval(*e.items[0]);
        if (!object.ok()) return object;
        if (object->isUndefined()) return at(e.loc, object->undefinedHint());
        return getAttribute(*object, e.name);
      }
      case ExprKind::kSubscript: {
        auto object = eval(*e.items[0]);
        if (!object.ok()) return object;
        if (object->isUndefined()) return at(e.loc, object->undefinedHint());
        auto key = eval(*e.items[1]);
        if (!key.ok()) return key;
        auto v = getItem(*object, *key);
        if (!v.ok()) return at(e.loc, v.error().message);
        return v;
      }
      case ExprKind::kSlice:
        return evalSlice(e);
      case ExprKind::kCall: {
        auto callee = eval(*e.items[0]);
        if (!callee.ok()) return callee;
        if (!callee->isFunction()) {
          std::string what = callee->isUndefined() ? callee->undefinedHint()
                                                   : fmt::format("'{}' object is not callable", callee->typeName());
          return at(e.loc, what);
        }
        auto args = evalArgs(e, 1);
        if (!args.ok()) return args.error();
        auto v = callee->asFunction()(*args);
        if (!v.ok() && v.error().message.rfind("line ", 0) != 0) return at(e.loc, v.error().message);
        return v;
      }
      case ExprKind::kFilter: {
        auto input = eval(*e.items[0]);
        if (!input.ok()) return input;
        auto args = evalArgs(e, 1);
        if (!args.ok()) return args.error();
        auto v = (*findFilter(e.name))(*input, *args);
        if (!v.ok()) return at(e.loc, fmt::format("filter '{}': {}", e.name, v.error().message));
        return v;
      }
      case ExprKind::kTest: {
        auto input = eval(*e.items[0]);
        if (!input.ok()) return input;
        auto args = evalArgs(e, 1);
        if (!args.ok()) return args.error();
        auto r = (*findTest(e.name))(*input, *args);
        if (!r.ok()) return at(e.loc, fmt::format("test '{}': {}", e.name, r.error().message));
        return Value(*r != e.negated);
      }
      case ExprKind::kUnary: {
        auto operand = eval(*e.items[0]);
        if (!operand.ok()) return operand;
        if (e.name == "not") return Value(!operand->truthy());
        if (operand->isUndefined()) return at(e.loc, operand->undefinedHint());
        if (!operand->isNumber())
          return at(e.loc, fmt::format("bad operand type for unary {}: '{}'", e.name, operand->typeName()));
        if (e.name == "+") return operand->isBool() ? Value(operand->asInt()) : *operand;
        if (operand->isFloat()) return Value(-operand->asFloat());
        if (auto negated = intArithmetic("-", 0, operand->asInt()); negated.ok()) return negated;
        else return at(e.loc, negated.error().message);
      }
      case ExprKind::kBinary:
        return evalBinary(e);
      case ExprKind::kTernary: {
        auto cond = eval(*e.items[1]);
        if (!cond.ok()) return cond;
        if (cond->truthy()) return eval(*e.items[0]);
        if (e.items[2]) return eval(*e.items[2]);
        return Value::undefined("the inline if-expression on line " + std::to_string(e.loc.line) +
                                " evaluated to false and no else section was defined.");
      }
    }
    return at(e.loc, "unsupported expression");
  }

  Result<Value> evalSlice(const Expr& e) {
    auto object = eval(*e.items[0]);
    if (!object.ok()) return object;
    if (object->isUndefined()) return at(e.loc, object->undefinedHint());
    Value bounds[3];
    for (int i = 0; i < 3; ++i) {
      if (!e.items[size_t(i) + 1]) {
        bounds[i] = Value::none();
        continue;
      }
      auto v = eval(*e.items[size_t(i) + 1]);
      if (!v.ok()) return v;
      bounds[i] = v.take();
    }
    if (object->isList()) {
      auto r = sliceIndices(bounds[0], bounds[1], bounds[2], int64_t(object->asList().size()));
      if (!r.ok()) return at(e.loc, r.error().message);
      return Value(applySlice(object->asList(), *r));
    }
    if (object->isString()) {
      std::u32string s = decodeUtf8(object->asString());
      auto r = sliceIndices(bounds[0], bounds[1], bounds[2], int64_t(s.size()));
      if (!r.ok()) return at(e.loc, r.error().message);
      return Value(encodeUtf8(applySlice(s, *r)));
    }
    return at(e.loc, fmt::format("'{}' object is not subscriptable", object->typeName()));
  }

  Result<Value> evalBinary(const Expr& e) {
    auto left = eval(*e.items[0]);
    if (!left.ok()) return left;
    const std::string& op = e.name;
    if (op == "and") return left->truthy() ? eval(*e.items[1]) : left;
    if (op == "or") return left->truthy() ? left : eval(*e.items[1]);
    auto right = eval(*e.items[1]);
    if (!right.ok()) return right;
    const Value& a = *left;
    const Value& b = *right;
    if (op == "==") return Value(equals(a, b));
    if (op == "!=") return Value(!equals(a, b));
    if (op == "~") return Value(toDisplayString(a) + toDisplayString(b));
    Result<Value> v = makeError("");
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      if (a.isUndefined() || b.isUndefined())
        return at(e.loc, (a.isUndefined() ? a : b).undefinedHint());
      auto less = op == "<" || op == ">=" ? lessThan(a, b) : lessThan(b, a);
      if (!less.ok()) return at(e.loc, less.error().message);
      // a >= b is not(a < b); a <= b is not(b < a)
      v = Value(op == "<" || op == ">" ? *less : !*less);
    } else if (op == "in" || op == "not in") {
      auto hit = contains(b, a);
      if (!hit.ok()) return at(e.loc, hit.error().message);
      v = Value(*hit == (op == "in"));
    } else {
      v = arithmetic(op, a, b);
      if (!v.ok()) return at(e.loc, v.error().message);
    }
    return v;
  }

  RenderOptions options_;
  std::vector<Scope> scopes_;
  int depth_ = 0;
};

}  // namespace

Result<std::string> renderTemplate(const Body& body, const Dict& variables, const RenderOptions& options) {
  return Renderer(variables, options).run(body);
}

}  // namespace kiln::jinja
