// The parser's state, shared by parser.cc (statements) and parse_expression.cc (expressions).
// Internal to tokenizer/jinja/.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace ridge::jinja::internal {

inline constexpr int kMaxNesting = 200;  // expressions and blocks; deeper is refused, not recursed

class Parser {
 public:
  using Type = Token::Type;
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  absl::StatusOr<Body> Run();

 private:
  const Token& Peek(size_t ahead = 0) const {
    const size_t i = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[i];
  }
  const Token& Next() {
    const Token& t = Peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).type == Type::kOperator && Peek(ahead).text == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).type == Type::kName && Peek(ahead).text == name;
  }
  absl::Status ErrorAt(const Token& t, const std::string& message) const {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", t.line, ", column ", t.column, ": ", message));
  }
  std::string Describe(const Token& t) const {
    switch (t.type) {
      case Type::kBlockEnd:
        return "'%}'";
      case Type::kVarEnd:
        return "'}}'";
      case Type::kEnd:
        return "the end of the template";
      case Type::kString:
        return "a string";
      default:
        return absl::StrCat("'", t.text, "'");
    }
  }
  absl::Status Expect(std::string_view op) {
    if (!IsOp(op)) {
      return ErrorAt(Peek(),
                     absl::StrCat("expected '", std::string(op), "', got ", Describe(Peek())));
    }
    Next();
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Peek().type != Type::kBlockEnd) {
      return ErrorAt(Peek(), absl::StrCat("expected '%}', got ", Describe(Peek())));
    }
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Peek().type != Type::kName) {
      return ErrorAt(Peek(), absl::StrCat("expected a name, got ", Describe(Peek())));
    }
    return Next().text;
  }
  // Statements until a block tag whose keyword is in `ends` (consumed up to the keyword; its
  // name goes to *end) or the end of the template (only allowed when `ends` is empty).
  absl::Status ParseBody(const std::set<std::string>& ends, Body* body, std::string* end);
  std::unique_ptr<Stmt> NewStmt(Stmt::Kind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->column = at.column;
    return s;
  }
  absl::StatusOr<std::unique_ptr<Stmt>> ParseStatement();
  absl::StatusOr<std::unique_ptr<Stmt>> ParseIf(const Token& at);
  absl::StatusOr<std::unique_ptr<Stmt>> ParseFor(const Token& at);
  absl::StatusOr<std::unique_ptr<Stmt>> ParseSet(const Token& at);
  // Parameters: (a, b=default, ...).
  absl::Status ParseParams(Stmt* stmt);
  absl::StatusOr<std::unique_ptr<Stmt>> ParseMacro(const Token& at);
  absl::StatusOr<std::unique_ptr<Stmt>> ParseCallBlock(const Token& at);
  absl::StatusOr<std::unique_ptr<Stmt>> ParseFilterBlock(const Token& at);
  // ---- expressions ----
  ExprPtr NewExpr(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }
  // a, b (a tuple without parentheses) or a single expression.
  absl::StatusOr<ExprPtr> ParseTuple();
  absl::StatusOr<ExprPtr> ParseConditional();
  absl::StatusOr<ExprPtr> Binary(Expr::Kind kind, std::string op, const Token& at, ExprPtr left,
                                 absl::StatusOr<ExprPtr> right);
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> ParseMath1();
  absl::StatusOr<ExprPtr> ParseConcat();
  absl::StatusOr<ExprPtr> ParseMath2();
  absl::StatusOr<ExprPtr> ParsePow();
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);

  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr subject);
  absl::Status ParseCallArgs(Expr* call);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr object, const Token& at);
  absl::Status CheckCalls() const;

  const std::vector<Token>& tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::set<std::string> macros_;
  std::set<std::string> assigned_;  // set targets and parameters: may hold a macro
  std::vector<const Token*> called_names_;
};

}  // namespace ridge::jinja::internal
