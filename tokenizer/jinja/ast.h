// The syntax tree of a parsed template: expressions and statements, each with its source line
// and column for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace ridge::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // items
    kTuple,      // items (a tuple is a list to the evaluator)
    kDict,       // items: key, value, key, value, ...
    kAttribute,  // items[0].name
    kSubscript,  // items[0][items[1]]
    kSlice,      // items[0][items[1]:items[2]:items[3]] (null items: omitted)
    kCall,       // items[0](items[1..], keywords)
    kFilter,     // items[0] | name(items[1..], keywords)
    kTest,       // items[0] is [not] name(items[1..])
    kUnary,      // name in {"-", "+", "not"}, items[0]
    kBinary,     // items[0] name items[1]; name in + - * / // % ** ~ == != < > <= >= in notin
    kAnd,
    kOr,
    kConditional,  // items[0] if items[1] else items[2] (items[2] null: undefined)
  };
  Kind kind;
  int line = 0;
  int column = 0;
  std::string name;
  Value value;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  bool negated = false;  // kTest: "is not"
};

// The variable a {% filter %} block's output is bound to while its filters run.
inline constexpr char kFilterBlockInput[] = "\x01filter-block";

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches (condition null: else)
    kFor,          // targets in expr [if condition] body [else else_body]
    kSet,          // targets = expr, or namespace attribute: targets[0].attribute = expr
    kSetBlock,     // {% set targets[0] %}body{% endset %}
    kMacro,        // name(params) body
    kCallBlock,    // {% call expr %}body{% endcall %}: body is caller()
    kFilterBlock,  // {% filter expr %}body{% endfilter %}: expr is a filter on a placeholder
    kBreak,
    kContinue,
    kGeneration,  // {% generation %}body{% endgeneration %} (transformers' extension)
  };
  Kind kind;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::string> targets;
  std::string attribute;
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters and defaults
  Body body;
  Body else_body;
};

}  // namespace ridge::jinja
