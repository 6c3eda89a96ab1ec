// Expressions: Jinja's precedence from the conditional down to primaries, postfix access,
// filters and tests.
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/parser_state.h"

namespace ridge::jinja::internal {

// a, b (a tuple without parentheses) or a single expression.
absl::StatusOr<ExprPtr> Parser::ParseTuple() {
  const Token& at = Peek();
  auto first = ParseConditional();
  if (!first.ok() || !IsOp(",")) return first;
  auto tuple = NewExpr(Expr::Kind::kTuple, at);
  tuple->items.push_back(*std::move(first));
  while (IsOp(",")) {
    Next();
    if (Peek().type == Type::kBlockEnd || Peek().type == Type::kVarEnd || IsOp(")")) break;
    auto item = ParseConditional();
    if (!item.ok()) return item.status();
    tuple->items.push_back(*std::move(item));
  }
  return tuple;
}

absl::StatusOr<ExprPtr> Parser::ParseConditional() {
  if (++depth_ > kMaxNesting) return ErrorAt(Peek(), "expression nested too deeply");
  const Token& at = Peek();
  auto body = ParseOr();
  if (!body.ok()) return body;
  while (IsName("if")) {
    Next();
    auto condition = ParseOr();
    if (!condition.ok()) return condition.status();
    auto e = NewExpr(Expr::Kind::kConditional, at);
    e->items.push_back(*std::move(body));
    e->items.push_back(*std::move(condition));
    if (IsName("else")) {
      Next();
      auto otherwise = ParseConditional();
      if (!otherwise.ok()) return otherwise.status();
      e->items.push_back(*std::move(otherwise));
    } else {
      e->items.push_back(nullptr);
    }
    body = std::move(e);
  }
  --depth_;
  return body;
}

absl::StatusOr<ExprPtr> Parser::Binary(Expr::Kind kind, std::string op, const Token& at,
                                       ExprPtr left, absl::StatusOr<ExprPtr> right) {
  if (!right.ok()) return right.status();
  auto e = NewExpr(kind, at);
  e->name = std::move(op);
  e->items.push_back(std::move(left));
  e->items.push_back(*std::move(right));
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseOr() {
  auto left = ParseAnd();
  while (left.ok() && IsName("or")) {
    const Token& at = Next();
    left = Binary(Expr::Kind::kOr, "or", at, *std::move(left), ParseAnd());
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  auto left = ParseNot();
  while (left.ok() && IsName("and")) {
    const Token& at = Next();
    left = Binary(Expr::Kind::kAnd, "and", at, *std::move(left), ParseNot());
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseNot() {
  if (IsName("not")) {
    if (++depth_ > kMaxNesting) return ErrorAt(Peek(), "expression nested too deeply");
    const Token& at = Next();
    auto operand = ParseNot();
    if (!operand.ok()) return operand;
    auto e = NewExpr(Expr::Kind::kUnary, at);
    e->name = "not";
    e->items.push_back(*std::move(operand));
    --depth_;
    return e;
  }
  return ParseCompare();
}

absl::StatusOr<ExprPtr> Parser::ParseCompare() {
  auto left = ParseMath1();
  while (left.ok()) {
    const Token& at = Peek();
    std::string op;
    if (at.type == Type::kOperator && (at.text == "==" || at.text == "!=" || at.text == "<" ||
                                       at.text == ">" || at.text == "<=" || at.text == ">=")) {
      op = at.text;
      Next();
    } else if (IsName("in")) {
      op = "in";
      Next();
    } else if (IsName("not") && IsName("in", 1)) {
      op = "notin";
      Next();
      Next();
    } else {
      break;
    }
    left = Binary(Expr::Kind::kBinary, op, at, *std::move(left), ParseMath1());
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseMath1() {
  auto left = ParseConcat();
  while (left.ok() && (IsOp("+") || IsOp("-"))) {
    const Token& at = Next();
    left = Binary(Expr::Kind::kBinary, at.text, at, *std::move(left), ParseConcat());
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseConcat() {
  auto left = ParseMath2();
  while (left.ok() && IsOp("~")) {
    const Token& at = Next();
    left = Binary(Expr::Kind::kBinary, "~", at, *std::move(left), ParseMath2());
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseMath2() {
  auto left = ParsePow();
  while (left.ok() && (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%"))) {
    const Token& at = Next();
    left = Binary(Expr::Kind::kBinary, at.text, at, *std::move(left), ParsePow());
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParsePow() {
  auto left = ParseUnary(true);
  while (left.ok() && IsOp("**")) {
    const Token& at = Next();
    left = Binary(Expr::Kind::kBinary, "**", at, *std::move(left), ParseUnary(true));
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  if (++depth_ > kMaxNesting) return ErrorAt(Peek(), "expression nested too deeply");
  absl::StatusOr<ExprPtr> node;
  if (IsOp("-") || IsOp("+")) {
    const Token& at = Next();
    auto operand = ParseUnary(false);
    if (!operand.ok()) return operand;
    auto e = NewExpr(Expr::Kind::kUnary, at);
    e->name = at.text;
    e->items.push_back(*std::move(operand));
    node = std::move(e);
  } else {
    node = ParsePrimary();
  }
  if (node.ok()) node = ParsePostfix(*std::move(node));
  if (node.ok() && with_filter) node = ParseFilterExpr(*std::move(node));
  --depth_;
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token& t = Peek();
  switch (t.type) {
    case Type::kName: {
      Next();
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        auto e = NewExpr(Expr::Kind::kLiteral, t);
        e->value = Value(t.text == "true" || t.text == "True");
        return e;
      }
      if (t.text == "none" || t.text == "None") {
        auto e = NewExpr(Expr::Kind::kLiteral, t);
        e->value = Value::None();
        return e;
      }
      auto e = NewExpr(Expr::Kind::kName, t);
      e->name = t.text;
      return e;
    }
    case Type::kString: {
      auto e = NewExpr(Expr::Kind::kLiteral, t);
      std::string text = Next().text;
      while (Peek().type == Type::kString) text += Next().text;  // "a" "b" is "ab"
      e->value = Value(std::move(text));
      return e;
    }
    case Type::kInt:
    case Type::kFloat: {
      Next();
      auto e = NewExpr(Expr::Kind::kLiteral, t);
      if (t.type == Type::kInt) {
        e->value = Value(static_cast<int64_t>(std::strtoll(t.text.c_str(), nullptr, 10)));
      } else {
        e->value = Value(std::strtod(t.text.c_str(), nullptr));
      }
      return e;
    }
    case Type::kOperator:
      if (t.text == "(") {
        Next();
        if (IsOp(")")) {
          Next();
          return NewExpr(Expr::Kind::kTuple, t);
        }
        auto inner = ParseTuple();
        if (!inner.ok()) return inner;
        if (absl::Status s = Expect(")"); !s.ok()) return s;
        return inner;
      }
      if (t.text == "[" || t.text == "{") {
        Next();
        const bool dict = t.text == "{";
        auto e = NewExpr(dict ? Expr::Kind::kDict : Expr::Kind::kList, t);
        const std::string close = dict ? "}" : "]";
        while (!IsOp(close)) {
          auto item = ParseConditional();
          if (!item.ok()) return item;
          e->items.push_back(*std::move(item));
          if (dict) {
            if (absl::Status s = Expect(":"); !s.ok()) return s;
            auto value = ParseConditional();
            if (!value.ok()) return value;
            e->items.push_back(*std::move(value));
          }
          if (!IsOp(",")) break;
          Next();
        }
        if (absl::Status s = Expect(close); !s.ok()) return s;
        return e;
      }
      break;
    default:
      break;
  }
  return ErrorAt(t, absl::StrCat("expected an expression, got ", Describe(t)));
}

absl::StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr object, const Token& at) {
  // [key] or [start:stop:step]
  std::vector<ExprPtr> parts(1);
  int colons = 0;
  while (!IsOp("]")) {
    if (IsOp(":")) {
      if (++colons > 2) return ErrorAt(Peek(), "a slice takes at most start:stop:step");
      Next();
      parts.emplace_back();
      continue;
    }
    if (parts.back() != nullptr)
      return ErrorAt(Peek(), absl::StrCat("expected ']', got ", Describe(Peek())));
    auto part = ParseConditional();
    if (!part.ok()) return part;
    parts.back() = *std::move(part);
  }
  Next();
  if (colons == 0) {
    if (parts[0] == nullptr) return ErrorAt(at, "empty subscript");
    auto e = NewExpr(Expr::Kind::kSubscript, at);
    e->items.push_back(std::move(object));
    e->items.push_back(std::move(parts[0]));
    return e;
  }
  auto e = NewExpr(Expr::Kind::kSlice, at);
  e->items.push_back(std::move(object));
  parts.resize(3);
  for (ExprPtr& p : parts) e->items.push_back(std::move(p));
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    const Token& at = Peek();
    if (IsOp(".")) {
      Next();
      if (Peek().type == Type::kInt) {  // foo.0 is foo[0]
        auto e = NewExpr(Expr::Kind::kSubscript, at);
        e->items.push_back(std::move(node));
        auto index = NewExpr(Expr::Kind::kLiteral, Peek());
        index->value = Value(static_cast<int64_t>(std::strtoll(Next().text.c_str(), nullptr, 10)));
        e->items.push_back(std::move(index));
        node = std::move(e);
        continue;
      }
      auto name = ExpectName();
      if (!name.ok()) return name.status();
      auto e = NewExpr(Expr::Kind::kAttribute, at);
      e->name = *name;
      e->items.push_back(std::move(node));
      node = std::move(e);
    } else if (IsOp("[")) {
      Next();
      auto e = ParseSubscript(std::move(node), at);
      if (!e.ok()) return e;
      node = *std::move(e);
    } else if (IsOp("(")) {
      auto e = NewExpr(Expr::Kind::kCall, at);
      if (node->kind == Expr::Kind::kName) {
        called_names_.push_back(&tokens_[pos_ - 1]);
      } else if (node->kind == Expr::Kind::kAttribute && !IsKnownMethod(node->name)) {
        return ErrorAt(at, absl::StrCat("unsupported method '", node->name, "()'"));
      }
      e->items.push_back(std::move(node));
      if (absl::Status s = ParseCallArgs(e.get()); !s.ok()) return s;
      node = std::move(e);
    } else {
      return node;
    }
  }
}

absl::Status Parser::ParseCallArgs(Expr* call) {
  if (absl::Status s = Expect("("); !s.ok()) return s;
  while (!IsOp(")")) {
    if (Peek().type == Type::kName && IsOp("=", 1)) {
      std::string name = Next().text;
      Next();
      auto value = ParseConditional();
      if (!value.ok()) return value.status();
      call->keywords.emplace_back(std::move(name), *std::move(value));
    } else {
      if (!call->keywords.empty()) {
        return ErrorAt(Peek(), "positional argument after keyword argument");
      }
      auto value = ParseConditional();
      if (!value.ok()) return value.status();
      call->items.push_back(*std::move(value));
    }
    if (!IsOp(",")) break;
    Next();
  }
  return Expect(")");
}

absl::StatusOr<ExprPtr> Parser::ParseFilter(ExprPtr subject) {
  const Token& at = Peek();
  auto name = ExpectName();
  if (!name.ok()) return name.status();
  std::string full = *name;
  while (IsOp(".")) {  // dotted filter names do not exist in chat templates; refuse clearly
    return ErrorAt(at, absl::StrCat("unsupported filter '", full, ".'"));
  }
  if (!IsKnownFilter(full)) return ErrorAt(at, absl::StrCat("unsupported filter '", full, "'"));
  auto e = NewExpr(Expr::Kind::kFilter, at);
  e->name = full;
  e->items.push_back(std::move(subject));
  if (IsOp("(")) {
    if (absl::Status s = ParseCallArgs(e.get()); !s.ok()) return s;
  }
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      Next();
      auto e = ParseFilter(std::move(node));
      if (!e.ok()) return e;
      node = *std::move(e);
    } else if (IsName("is")) {
      const Token& at = Next();
      auto e = NewExpr(Expr::Kind::kTest, at);
      if (IsName("not")) {
        Next();
        e->negated = true;
      }
      const Token& name_token = Peek();
      auto name = ExpectName();
      if (!name.ok()) return name.status();
      // "none", "true" and "false" are names here, not literals.
      if (!IsKnownTest(*name)) {
        return ErrorAt(name_token, absl::StrCat("unsupported test '", *name, "'"));
      }
      e->name = *name;
      e->items.push_back(std::move(node));
      if (IsOp("(")) {
        if (absl::Status s = ParseCallArgs(e.get()); !s.ok()) return s;
      } else {
        const Token& t = Peek();
        const bool arg_follows =
            t.type == Type::kString || t.type == Type::kInt || t.type == Type::kFloat ||
            (t.type == Type::kName && t.text != "else" && t.text != "or" && t.text != "and" &&
             t.text != "if" && t.text != "in" && t.text != "not" && t.text != "is") ||
            IsOp("[") || IsOp("{");
        if (arg_follows) {
          auto arg = ParsePrimary();
          if (!arg.ok()) return arg;
          auto post = ParsePostfix(*std::move(arg));
          if (!post.ok()) return post;
          e->items.push_back(*std::move(post));
        }
      }
      node = std::move(e);
    } else if (IsOp("(")) {
      auto e = ParsePostfix(std::move(node));
      if (!e.ok()) return e;
      node = *std::move(e);
    } else {
      return node;
    }
  }
}
}  // namespace ridge::jinja::internal
