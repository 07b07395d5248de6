// The parsed template: statements (text, output, if, for, set, macro, ...)
// over expressions. Every node keeps its source position so that errors at
// render time name the line and column of the construct that failed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/chat/jinja/lexer.h"
#include "runtime/chat/jinja/value.h"

namespace kiln::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // [items...]; name "tuple" for (a, b)
  kDict,       // {items[0]: items[1], ...}
  kAttribute,  // items[0].name
  kSubscript,  // items[0][items[1]]
  kSlice,      // items[0][items[1]:items[2]:items[3]]; a missing bound is null
  kCall,       // items[0](items[1..], keyword names for the last ones)
  kFilter,     // items[0] | name(items[1..])
  kTest,       // items[0] is [not] name(items[1..])
  kUnary,      // name in {"not", "-", "+"}, items[0]
  kBinary,     // items[0] name items[1]; name is the operator, "and", "or", "in", "not in"
  kTernary,    // items[0] if items[1] else items[2] (items[2] may be null)
};

struct Expr {
  ExprKind kind;
  SourceLoc loc;
  std::string name;
  Value literal;
  std::vector<ExprPtr> items;
  // Calls, filters and tests: the names of the trailing keyword arguments;
  // items[items.size() - keywords.size() ...] are their values.
  std::vector<std::string> keywords;
  bool negated = false;  // "is not"
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

enum class NodeKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // if expr: body, else: else_body (elif nests an kIf there)
  kFor,       // for targets in expr [if condition]: body, else: else_body
  kSet,       // set targets = expr; targets {"ns", "attr"} with attribute
  kSetBlock,  // set targets[0]: the rendered body
  kMacro,     // macro text(targets = defaults): body
  kBreak,
  kContinue,
  kScope,     // a body rendered as is ({% generation %})
};

struct Node {
  NodeKind kind;
  SourceLoc loc;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  bool attribute = false;          // set ns.attr = ...
  std::vector<ExprPtr> defaults;   // macro parameter defaults (null: none)
  Body body;
  Body else_body;
};

}  // namespace kiln::jinja
