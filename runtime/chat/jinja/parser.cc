#include "runtime/chat/jinja/parser.h"

#include <initializer_list>

#include "runtime/chat/jinja/builtins.h"

namespace kiln::jinja {

namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Result<Body> parseAll() {
    std::string end_tag;
    auto body = parseBody({}, end_tag);
    if (!body.ok()) return body.error();
    return body.take();
  }

 private:
  // --- token stream ---------------------------------------------------------
  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const Token& next() { return tokens_[std::min(pos_++, tokens_.size() - 1)]; }
  bool isOp(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kOperator && peek(ahead).text == op;
  }
  bool isName(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).text == name;
  }
  bool acceptOp(std::string_view op) {
    if (!isOp(op)) return false;
    ++pos_;
    return true;
  }
  bool acceptName(std::string_view name) {
    if (!isName(name)) return false;
    ++pos_;
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kEnd:
        return "end of template";
      case TokenKind::kText:
        return "template text";
      case TokenKind::kString:
        return "string '" + t.text + "'";
      default:
        return "'" + t.text + "'";
    }
  }
  Error errorAt(SourceLoc loc, const std::string& what) const {
    return makeError("line {} column {}: {}", loc.line, loc.column, what);
  }
  Error unexpected(const std::string& expected) const {
    return errorAt(peek().loc, "unexpected " + describe(peek()) + ", expected " + expected);
  }
  Status expectOp(std::string_view op) {
    if (acceptOp(op)) return Status::success();
    return unexpected("'" + std::string(op) + "'");
  }
  Status expectBlockClose() {
    if (peek().kind == TokenKind::kBlockClose) {
      ++pos_;
      return Status::success();
    }
    return unexpected("'%}'");
  }
  Result<std::string> expectName(const std::string& what) {
    if (peek().kind != TokenKind::kName) return unexpected(what);
    return next().text;
  }

  // --- statements -----------------------------------------------------------
  // Parses nodes until a block tag named in `ends`; leaves the position
  // after that tag's name and reports which one in `end_tag`.
  Result<Body> parseBody(std::initializer_list<std::string_view> ends, std::string& end_tag) {
    DepthGuard guard(depth_);
    if (depth_ > kMaxDepth) return errorAt(peek().loc, "blocks nest too deeply");
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == TokenKind::kEnd) {
        if (ends.size() == 0) return body;
        std::string list;
        for (std::string_view e : ends) list += (list.empty() ? "'" : " or '") + std::string(e) + "'";
        return errorAt(t.loc, "unexpected end of template, expected " + list);
      }
      if (t.kind == TokenKind::kText) {
        auto node = makeNode(NodeKind::kText, t.loc);
        node->text = next().text;
        body.push_back(std::move(node));
        continue;
      }
      if (t.kind == TokenKind::kOutputOpen) {
        auto node = makeNode(NodeKind::kOutput, next().loc);
        auto e = parseExpression();
        if (!e.ok()) return e.error();
        node->expr = e.take();
        if (peek().kind != TokenKind::kOutputClose) return unexpected("'}}'");
        ++pos_;
        body.push_back(std::move(node));
        continue;
      }
      if (t.kind != TokenKind::kBlockOpen) return unexpected("template text or a tag");
      const Token& tag = peek(1);
      if (tag.kind != TokenKind::kName) {
        ++pos_;
        return unexpected("a tag name");
      }
      for (std::string_view e : ends) {
        if (tag.text == e) {
          pos_ += 2;
          end_tag = tag.text;
          return body;
        }
      }
      pos_ += 2;
      auto node = parseStatement(tag);
      if (!node.ok()) return node.error();
      body.push_back(node.take());
    }
  }

  static NodePtr makeNode(NodeKind kind, SourceLoc loc) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->loc = loc;
    return node;
  }

  Result<NodePtr> parseStatement(const Token& tag) {
    const std::string& name = tag.text;
    if (name == "if") return parseIf(tag.loc);
    if (name == "for") return parseFor(tag.loc);
    if (name == "set") return parseSet(tag.loc);
    if (name == "macro") return parseMacro(tag.loc);
    if (name == "break" || name == "continue") {
      KILN_RETURN_IF_ERROR(expectBlockClose());
      return makeNode(name == "break" ? NodeKind::kBreak : NodeKind::kContinue, tag.loc);
    }
    if (name == "generation") {  // transformers' assistant-mask tag: renders its body
      KILN_RETURN_IF_ERROR(expectBlockClose());
      auto node = makeNode(NodeKind::kScope, tag.loc);
      std::string end;
      auto body = parseBody({"endgeneration"}, end);
      if (!body.ok()) return body.error();
      node->body = body.take();
      KILN_RETURN_IF_ERROR(expectBlockClose());
      return node;
    }
    static const char* kKnownUnsupported[] = {"call",  "filter", "raw",    "include", "import", "from",
                                              "block", "extends", "with",  "autoescape", "do"};
    for (const char* known : kKnownUnsupported)
      if (name == known) return errorAt(tag.loc, "unsupported tag '" + name + "' (kiln's Jinja subset)");
    return errorAt(tag.loc, "unknown tag '" + name + "'");
  }

  Result<NodePtr> parseIf(SourceLoc loc) {
    auto node = makeNode(NodeKind::kIf, loc);
    auto cond = parseExpression();
    if (!cond.ok()) return cond.error();
    node->condition = cond.take();
    KILN_RETURN_IF_ERROR(expectBlockClose());
    std::string end;
    auto body = parseBody({"elif", "else", "endif"}, end);
    if (!body.ok()) return body.error();
    node->body = body.take();
    if (end == "elif") {
      auto elif = parseIf(peek().loc);
      if (!elif.ok()) return elif.error();
      node->else_body.push_back(elif.take());
      return node;  // the nested if consumed the endif
    }
    if (end == "else") {
      KILN_RETURN_IF_ERROR(expectBlockClose());
      auto else_body = parseBody({"endif"}, end);
      if (!else_body.ok()) return else_body.error();
      node->else_body = else_body.take();
    }
    KILN_RETURN_IF_ERROR(expectBlockClose());
    return node;
  }

  Result<NodePtr> parseFor(SourceLoc loc) {
    auto node = makeNode(NodeKind::kFor, loc);
    do {
      auto target = expectName("a loop variable");
      if (!target.ok()) return target.error();
      node->targets.push_back(target.take());
    } while (acceptOp(","));
    if (!acceptName("in")) return unexpected("'in'");
    // The iterable stops before a loop filter's 'if': no ternary here.
    auto iterable = parseOr();
    if (!iterable.ok()) return iterable.error();
    node->expr = iterable.take();
    if (acceptName("if")) {
      auto cond = parseOr();
      if (!cond.ok()) return cond.error();
      node->condition = cond.take();
    }
    if (isName("recursive")) return errorAt(peek().loc, "unsupported construct 'recursive' loops");
    KILN_RETURN_IF_ERROR(expectBlockClose());
    std::string end;
    auto body = parseBody({"else", "endfor"}, end);
    if (!body.ok()) return body.error();
    node->body = body.take();
    if (end == "else") {
      KILN_RETURN_IF_ERROR(expectBlockClose());
      auto else_body = parseBody({"endfor"}, end);
      if (!else_body.ok()) return else_body.error();
      node->else_body = else_body.take();
    }
    KILN_RETURN_IF_ERROR(expectBlockClose());
    return node;
  }

  Result<NodePtr> parseSet(SourceLoc loc) {
    auto node = makeNode(NodeKind::kSet, loc);
    auto first = expectName("a variable name");
    if (!first.ok()) return first.error();
    node->targets.push_back(first.take());
    if (acceptOp(".")) {
      auto attr = expectName("an attribute name");
      if (!attr.ok()) return attr.error();
      node->targets.push_back(attr.take());
      node->attribute = true;
    } else {
      while (acceptOp(",")) {
        auto more = expectName("a variable name");
        if (!more.ok()) return more.error();
        node->targets.push_back(more.take());
      }
    }
    if (peek().kind == TokenKind::kBlockClose && !node->attribute && node->targets.size() == 1) {
      ++pos_;
      node->kind = NodeKind::kSetBlock;
      std::string end;
      auto body = parseBody({"endset"}, end);
      if (!body.ok()) return body.error();
      node->body = body.take();
      KILN_RETURN_IF_ERROR(expectBlockClose());
      return node;
    }
    KILN_RETURN_IF_ERROR(expectOp("="));
    auto value = parseTupleOrExpression();
    if (!value.ok()) return value.error();
    node->expr = value.take();
    KILN_RETURN_IF_ERROR(expectBlockClose());
    return node;
  }

  Result<NodePtr> parseMacro(SourceLoc loc) {
    auto node = makeNode(NodeKind::kMacro, loc);
    auto name = expectName("a macro name");
    if (!name.ok()) return name.error();
    node->text = name.take();
    KILN_RETURN_IF_ERROR(expectOp("("));
    while (!acceptOp(")")) {
      if (!node->targets.empty()) KILN_RETURN_IF_ERROR(expectOp(","));
      auto param = expectName("a parameter name");
      if (!param.ok()) return param.error();
      node->targets.push_back(param.take());
      ExprPtr def;
      if (acceptOp("=")) {
        auto e = parseExpression();
        if (!e.ok()) return e.error();
        def = e.take();
      }
      node->defaults.push_back(std::move(def));
    }
    KILN_RETURN_IF_ERROR(expectBlockClose());
    std::string end;
    auto body = parseBody({"endmacro"}, end);
    if (!body.ok()) return body.error();
    node->body = body.take();
    KILN_RETURN_IF_ERROR(expectBlockClose());
    return node;
  }

  // --- expressions (jinja2's precedence, loosest first) ---------------------
  static ExprPtr makeExpr(ExprKind kind, SourceLoc loc) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->loc = loc;
    return e;
  }

  // a, b  ->  a list (jinja2's tuple), as `set` accepts it
  Result<ExprPtr> parseTupleOrExpression() {
    SourceLoc loc = peek().loc;
    auto first = parseExpression();
    if (!first.ok() || !isOp(",")) return first;
    auto tuple = makeExpr(ExprKind::kList, loc);
    tuple->name = "tuple";
    tuple->items.push_back(first.take());
    while (acceptOp(",")) {
      auto item = parseExpression();
      if (!item.ok()) return item.error();
      tuple->items.push_back(item.take());
    }
    return tuple;
  }

  // Nesting deeper than this (blocks or parentheses) is refused rather than
  // recursing until the stack overflows on a hostile template.
  static constexpr int kMaxDepth = 200;

  struct DepthGuard {
    explicit DepthGuard(int& depth) : depth_(depth) { ++depth_; }
    ~DepthGuard() { --depth_; }
    int& depth_;
  };

  Result<ExprPtr> parseExpression() {
    DepthGuard guard(depth_);
    if (depth_ > kMaxDepth) return errorAt(peek().loc, "expressions nest too deeply");
    auto value = parseOr();
    if (!value.ok()) return value;
    while (isName("if")) {
      SourceLoc loc = next().loc;
      auto cond = parseOr();
      if (!cond.ok()) return cond.error();
      auto e = makeExpr(ExprKind::kTernary, loc);
      e->items.push_back(value.take());
      e->items.push_back(cond.take());
      if (acceptName("else")) {
        auto other = parseExpression();
        if (!other.ok()) return other.error();
        e->items.push_back(other.take());
      } else {
        e->items.push_back(nullptr);
      }
      value = std::move(e);
    }
    return value;
  }

  Result<ExprPtr> binary(ExprPtr left, std::string op, SourceLoc loc, Result<ExprPtr> right) {
    if (!right.ok()) return right.error();
    auto e = makeExpr(ExprKind::kBinary, loc);
    e->name = std::move(op);
    e->items.push_back(std::move(left));
    e->items.push_back(right.take());
    return e;
  }

  Result<ExprPtr> parseOr() {
    auto left = parseAnd();
    while (left.ok() && isName("or")) {
      SourceLoc loc = next().loc;
      left = binary(left.take(), "or", loc, parseAnd());
    }
    return left;
  }

  Result<ExprPtr> parseAnd() {
    auto left = parseNot();
    while (left.ok() && isName("and")) {
      SourceLoc loc = next().loc;
      left = binary(left.take(), "and", loc, parseNot());
    }
    return left;
  }

  Result<ExprPtr> parseNot() {
    if (isName("not")) {
      DepthGuard guard(depth_);
      if (depth_ > kMaxDepth) return errorAt(peek().loc, "expressions nest too deeply");
      SourceLoc loc = next().loc;
      auto operand = parseNot();
      if (!operand.ok()) return operand;
      auto e = makeExpr(ExprKind::kUnary, loc);
      e->name = "not";
      e->items.push_back(operand.take());
      return e;
    }
    return parseCompare();
  }

  Result<ExprPtr> parseCompare() {
    auto left = parseMath1();
    while (left.ok()) {
      SourceLoc loc = peek().loc;
      std::string op;
      if (peek().kind == TokenKind::kOperator &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
           peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (isName("in")) {
        ++pos_;
        op = "in";
      } else if (isName("not") && isName("in", 1)) {
        pos_ += 2;
        op = "not in";
      } else {
        break;
      }
      left = binary(left.take(), op, loc, parseMath1());
    }
    return left;
  }

  Result<ExprPtr> parseMath1() {
    auto left = parseConcat();
    while (left.ok() && (isOp("+") || isOp("-"))) {
      const Token& op = next();
      left = binary(left.take(), op.text, op.loc, parseConcat());
    }
    return left;
  }

  Result<ExprPtr> parseConcat() {
    auto left = parseMath2();
    while (left.ok() && isOp("~")) {
      const Token& op = next();
      left = binary(left.take(), "~", op.loc, parseMath2());
    }
    return left;
  }

  Result<ExprPtr> parseMath2() {
    auto left = parsePow();
    while (left.ok() && (isOp("*") || isOp("/") || isOp("//") || isOp("%"))) {
      const Token& op = next();
      left = binary(left.take(), op.text, op.loc, parsePow());
    }
    return left;
  }

  Result<ExprPtr> parsePow() {
    auto left = parseUnary(true);
    while (left.ok() && isOp("**")) {
      const Token& op = next();
      left = binary(left.take(), "**", op.loc, parseUnary(true));
    }
    return left;
  }

  // jinja2: -x|f is -(x|f); filters bind tighter than arithmetic.
  Result<ExprPtr> parseUnary(bool with_filter) {
    Result<ExprPtr> node = makeError("");
    if (isOp("-") || isOp("+")) {
      DepthGuard guard(depth_);
      if (depth_ > kMaxDepth) return errorAt(peek().loc, "expressions nest too deeply");
      const Token& op = next();
      auto operand = parseUnary(false);
      if (!operand.ok()) return operand;
      auto e = makeExpr(ExprKind::kUnary, op.loc);
      e->name = op.text;
      e->items.push_back(operand.take());
      node = std::move(e);
    } else {
      node = parsePrimary();
    }
    if (!node.ok()) return node;
    node = parsePostfix(node.take());
    if (node.ok() && with_filter) node = parseFilterChain(node.take());
    return node;
  }

  Result<ExprPtr> parsePrimary() {
    const Token& t = peek();
    switch (t.kind) {
      case TokenKind::kName: {
        ++pos_;
        auto e = makeExpr(ExprKind::kLiteral, t.loc);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::none();
        } else {
          e->kind = ExprKind::kName;
          e->name = t.text;
        }
        return e;
      }
      case TokenKind::kString: {
        auto e = makeExpr(ExprKind::kLiteral, t.loc);
        std::string text;
        while (peek().kind == TokenKind::kString) text += next().text;  // 'a' 'b' is 'ab'
        e->literal = Value(std::move(text));
        return e;
      }
      case TokenKind::kInteger: {
        auto e = makeExpr(ExprKind::kLiteral, next().loc);
        e->literal = Value(t.integer);
        return e;
      }
      case TokenKind::kFloat: {
        auto e = makeExpr(ExprKind::kLiteral, next().loc);
        e->literal = Value(t.number);
        return e;
      }
      case TokenKind::kOperator:
        if (t.text == "(") {
          ++pos_;
          if (acceptOp(")")) {  // ()
            auto empty = makeExpr(ExprKind::kList, t.loc);
            empty->name = "tuple";
            return empty;
          }
          auto inner = parseTupleOrExpression();
          if (!inner.ok()) return inner;
          KILN_RETURN_IF_ERROR(expectOp(")"));
          return inner;
        }
        if (t.text == "[") {
          ++pos_;
          auto e = makeExpr(ExprKind::kList, t.loc);
          while (!acceptOp("]")) {
            if (!e->items.empty()) KILN_RETURN_IF_ERROR(expectOp(","));
            if (acceptOp("]")) break;  // trailing comma
            auto item = parseExpression();
            if (!item.ok()) return item;
            e->items.push_back(item.take());
          }
          return e;
        }
        if (t.text == "{") {
          ++pos_;
          auto e = makeExpr(ExprKind::kDict, t.loc);
          while (!acceptOp("}")) {
            if (!e->items.empty()) KILN_RETURN_IF_ERROR(expectOp(","));
            if (acceptOp("}")) break;
            auto key = parseExpression();
            if (!key.ok()) return key;
            KILN_RETURN_IF_ERROR(expectOp(":"));
            auto value = parseExpression();
            if (!value.ok()) return value;
            e->items.push_back(key.take());
            e->items.push_back(value.take());
          }
          return e;
        }
        break;
      default:
        break;
    }
    return unexpected("an expression");
  }

  // f(a, b, key=c) after the '(' -> positional then keyword items.
  Status parseCallArgs(Expr& e) {
    while (!acceptOp(")")) {
      if (e.items.size() > 1 || !e.keywords.empty()) KILN_RETURN_IF_ERROR(expectOp(","));
      if (acceptOp(")")) break;
      if (peek().kind == TokenKind::kName && isOp("=", 1)) {
        std::string key = next().text;
        ++pos_;
        auto value = parseExpression();
        if (!value.ok()) return value.error();
        e.keywords.push_back(std::move(key));
        e.items.push_back(value.take());
        continue;
      }
      if (!e.keywords.empty()) return errorAt(peek().loc, "positional argument after keyword argument");
      auto value = parseExpression();
      if (!value.ok()) return value.error();
      e.items.push_back(value.take());
    }
    return Status::success();
  }

  Result<ExprPtr> parsePostfix(ExprPtr node) {
    while (true) {
      if (isOp(".")) {
        SourceLoc loc = next().loc;
        auto e = makeExpr(ExprKind::kAttribute, loc);
        if (peek().kind == TokenKind::kName) {
          e->name = next().text;
        } else if (peek().kind == TokenKind::kInteger) {  // x.0 is x[0]
          e->kind = ExprKind::kSubscript;
          auto index = makeExpr(ExprKind::kLiteral, peek().loc);
          index->literal = Value(next().integer);
          e->items.push_back(std::move(node));
          e->items.push_back(std::move(index));
          node = std::move(e);
          continue;
        } else {
          return unexpected("an attribute name");
        }
        e->items.push_back(std::move(node));
        node = std::move(e);
      } else if (isOp("[")) {
        SourceLoc loc = next().loc;
        auto parts = parseSubscript(std::move(node), loc);
        if (!parts.ok()) return parts;
        node = parts.take();
      } else if (isOp("(")) {
        ++pos_;
        auto e = makeExpr(ExprKind::kCall, node->loc);  // errors point at the callee
        e->items.push_back(std::move(node));
        KILN_RETURN_IF_ERROR(parseCallArgs(*e));
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  // After '[': an index or a slice [start:stop:step], each part optional.
  Result<ExprPtr> parseSubscript(ExprPtr object, SourceLoc loc) {
    std::vector<ExprPtr> parts(1);
    bool slice = false;
    while (true) {
      if (acceptOp("]")) break;
      if (acceptOp(":")) {
        slice = true;
        parts.emplace_back();
        if (parts.size() > 3) return errorAt(loc, "a slice takes at most start:stop:step");
        continue;
      }
      if (parts.back()) return unexpected("']'");
      auto e = parseExpression();
      if (!e.ok()) return e;
      parts.back() = e.take();
    }
    if (!slice) {
      if (!parts[0]) return errorAt(loc, "empty subscript");
      auto e = makeExpr(ExprKind::kSubscript, loc);
      e->items.push_back(std::move(object));
      e->items.push_back(std::move(parts[0]));
      return e;
    }
    auto e = makeExpr(ExprKind::kSlice, loc);
    e->items.push_back(std::move(object));
    parts.resize(3);
    for (auto& p : parts) e->items.push_back(std::move(p));
    return e;
  }

  Result<ExprPtr> parseFilterChain(ExprPtr node) {
    while (true) {
      if (isOp("|")) {
        ++pos_;
        SourceLoc loc = peek().loc;
        auto name = expectName("a filter name");
        if (!name.ok()) return name.error();
        if (!findFilter(*name)) return errorAt(loc, "unknown filter '" + *name + "'");
        auto e = makeExpr(ExprKind::kFilter, loc);
        e->name = name.take();
        e->items.push_back(std::move(node));
        if (acceptOp("(")) KILN_RETURN_IF_ERROR(parseCallArgs(*e));
        node = std::move(e);
      } else if (isName("is")) {
        ++pos_;
        bool negated = acceptName("not");
        SourceLoc loc = peek().loc;
        auto name = expectName("a test name");
        if (!name.ok()) return name.error();
        if (!findTest(*name)) return errorAt(loc, "unknown test '" + *name + "'");
        auto e = makeExpr(ExprKind::kTest, loc);
        e->name = name.take();
        e->negated = negated;
        e->items.push_back(std::move(node));
        if (acceptOp("(")) {
          KILN_RETURN_IF_ERROR(parseCallArgs(*e));
        } else if ((peek().kind == TokenKind::kName || peek().kind == TokenKind::kString ||
                    peek().kind == TokenKind::kInteger || peek().kind == TokenKind::kFloat || isOp("[") ||
                    isOp("{")) &&
                   !isName("else") && !isName("or") && !isName("and") && !isName("if") && !isName("is")) {
          // `is equalto 'x'`: one argument without parentheses
          auto arg = parsePrimary();
          if (!arg.ok()) return arg;
          auto full = parsePostfix(arg.take());
          if (!full.ok()) return full;
          e->items.push_back(full.take());
        }
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<Body> parseTemplate(std::string_view source) {
  auto tokens = tokenize(source);
  if (!tokens.ok()) return tokens.error();
  return Parser(tokens.take()).parseAll();
}

}  // namespace kiln::jinja
