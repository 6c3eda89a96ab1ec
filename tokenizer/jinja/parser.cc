#include "tokenizer/jinja/parser.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/parser_state.h"

namespace ridge::jinja {
namespace internal {

absl::StatusOr<Body> Parser::Run() {
  Body body;
  std::string end;
  if (absl::Status s = ParseBody({}, &body, &end); !s.ok()) return s;
  if (absl::Status s = CheckCalls(); !s.ok()) return s;
  return body;
}

// Statements until a block tag whose keyword is in `ends` (consumed up to the keyword; its
// name goes to *end) or the end of the template (only allowed when `ends` is empty).
absl::Status Parser::ParseBody(const std::set<std::string>& ends, Body* body, std::string* end) {
  if (++depth_ > kMaxNesting) return ErrorAt(Peek(), "blocks nested too deeply");
  while (true) {
    const Token& t = Peek();
    if (t.type == Type::kEnd) {
      if (!ends.empty()) {
        return ErrorAt(
            t, absl::StrCat("unexpected end of template; expected '{% ", *ends.begin(), " %}'"));
      }
      --depth_;
      return absl::OkStatus();
    }
    if (t.type == Type::kText) {
      auto stmt = NewStmt(Stmt::Kind::kText, t);
      stmt->text = t.text;
      body->push_back(std::move(stmt));
      Next();
    } else if (t.type == Type::kVarBegin) {
      Next();
      auto stmt = NewStmt(Stmt::Kind::kOutput, t);
      auto expr = ParseTuple();
      if (!expr.ok()) return expr.status();
      stmt->expr = *std::move(expr);
      if (Peek().type != Type::kVarEnd) {
        return ErrorAt(Peek(), absl::StrCat("expected '}}', got ", Describe(Peek())));
      }
      Next();
      body->push_back(std::move(stmt));
    } else {  // block
      const Token& keyword = Peek(1);
      if (keyword.type == Type::kName && ends.count(keyword.text) > 0) {
        Next();
        Next();
        *end = keyword.text;
        --depth_;
        return absl::OkStatus();
      }
      auto stmt = ParseStatement();
      if (!stmt.ok()) return stmt.status();
      body->push_back(*std::move(stmt));
    }
  }
}

absl::StatusOr<std::unique_ptr<Stmt>> Parser::ParseStatement() {
  Next();  // {%
  const Token& keyword = Peek();
  if (keyword.type != Type::kName) {
    return ErrorAt(keyword, absl::StrCat("expected a statement, got ", Describe(keyword)));
  }
  const std::string word = Next().text;
  if (word == "if") return ParseIf(keyword);
  if (word == "for") return ParseFor(keyword);
  if (word == "set") return ParseSet(keyword);
  if (word == "macro") return ParseMacro(keyword);
  if (word == "call") return ParseCallBlock(keyword);
  if (word == "filter") return ParseFilterBlock(keyword);
  if (word == "generation") {
    auto stmt = NewStmt(Stmt::Kind::kGeneration, keyword);
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    std::string end;
    if (absl::Status s = ParseBody({"endgeneration"}, &stmt->body, &end); !s.ok()) return s;
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    return stmt;
  }
  if (word == "break" || word == "continue") {
    if (loop_depth_ == 0) return ErrorAt(keyword, absl::StrCat("'", word, "' outside a loop"));
    auto stmt = NewStmt(word == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, keyword);
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    return stmt;
  }
  return ErrorAt(keyword, absl::StrCat("unsupported statement '{% ", word,
                                       " %}' (supported: if, for, set, macro, call, filter, "
                                       "break, continue, generation)"));
}

absl::StatusOr<std::unique_ptr<Stmt>> Parser::ParseIf(const Token& at) {
  auto stmt = NewStmt(Stmt::Kind::kIf, at);
  while (true) {
    auto condition = ParseTuple();
    if (!condition.ok()) return condition.status();
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    Body body;
    std::string end;
    if (absl::Status s = ParseBody({"elif", "else", "endif"}, &body, &end); !s.ok()) return s;
    stmt->branches.emplace_back(*std::move(condition), std::move(body));
    if (end == "elif") continue;
    if (end == "else") {
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      Body else_body;
      if (absl::Status s = ParseBody({"endif"}, &else_body, &end); !s.ok()) return s;
      stmt->branches.emplace_back(nullptr, std::move(else_body));
    }
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    return stmt;
  }
}

absl::StatusOr<std::unique_ptr<Stmt>> Parser::ParseFor(const Token& at) {
  auto stmt = NewStmt(Stmt::Kind::kFor, at);
  do {
    auto name = ExpectName();
    if (!name.ok()) return name.status();
    stmt->targets.push_back(*name);
  } while (IsOp(",") && (Next(), true));
  if (!IsName("in")) return ErrorAt(Peek(), absl::StrCat("expected 'in', got ", Describe(Peek())));
  Next();
  auto iter = ParseOr();  // not a conditional: "if" here filters the loop
  if (!iter.ok()) return iter.status();
  stmt->expr = *std::move(iter);
  if (IsName("if")) {
    Next();
    auto condition = ParseOr();
    if (!condition.ok()) return condition.status();
    stmt->condition = *std::move(condition);
  }
  if (IsName("recursive")) return ErrorAt(Peek(), "recursive loops are not supported");
  if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
  ++loop_depth_;
  std::string end;
  if (absl::Status s = ParseBody({"else", "endfor"}, &stmt->body, &end); !s.ok()) return s;
  --loop_depth_;
  if (end == "else") {
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    if (absl::Status s = ParseBody({"endfor"}, &stmt->else_body, &end); !s.ok()) return s;
  }
  if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
  return stmt;
}

absl::StatusOr<std::unique_ptr<Stmt>> Parser::ParseSet(const Token& at) {
  auto stmt = NewStmt(Stmt::Kind::kSet, at);
  auto first = ExpectName();
  if (!first.ok()) return first.status();
  stmt->targets.push_back(*first);
  if (IsOp(".")) {
    Next();
    auto attribute = ExpectName();
    if (!attribute.ok()) return attribute.status();
    stmt->attribute = *attribute;
  } else {
    while (IsOp(",")) {
      Next();
      auto name = ExpectName();
      if (!name.ok()) return name.status();
      stmt->targets.push_back(*name);
    }
  }
  for (const std::string& t : stmt->targets) assigned_.insert(t);
  if (Peek().type == Type::kBlockEnd && stmt->attribute.empty() && stmt->targets.size() == 1) {
    Next();
    stmt->kind = Stmt::Kind::kSetBlock;
    std::string end;
    if (absl::Status s = ParseBody({"endset"}, &stmt->body, &end); !s.ok()) return s;
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    return stmt;
  }
  if (absl::Status s = Expect("="); !s.ok()) return s;
  auto value = ParseTuple();
  if (!value.ok()) return value.status();
  stmt->expr = *std::move(value);
  if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
  return stmt;
}

// Parameters: (a, b=default, ...).
absl::Status Parser::ParseParams(Stmt* stmt) {
  if (absl::Status s = Expect("("); !s.ok()) return s;
  while (!IsOp(")")) {
    auto name = ExpectName();
    if (!name.ok()) return name.status();
    ExprPtr fallback;
    if (IsOp("=")) {
      Next();
      auto value = ParseConditional();
      if (!value.ok()) return value.status();
      fallback = *std::move(value);
    }
    assigned_.insert(*name);
    stmt->params.emplace_back(*name, std::move(fallback));
    if (!IsOp(",")) break;
    Next();
  }
  return Expect(")");
}

absl::StatusOr<std::unique_ptr<Stmt>> Parser::ParseMacro(const Token& at) {
  auto stmt = NewStmt(Stmt::Kind::kMacro, at);
  auto name = ExpectName();
  if (!name.ok()) return name.status();
  stmt->name = *name;
  macros_.insert(*name);
  if (absl::Status s = ParseParams(stmt.get()); !s.ok()) return s;
  if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
  std::string end;
  const int saved_loops = loop_depth_;
  loop_depth_ = 0;
  if (absl::Status s = ParseBody({"endmacro"}, &stmt->body, &end); !s.ok()) return s;
  loop_depth_ = saved_loops;
  if (Peek().type == Type::kName && Peek().text == stmt->name) Next();
  if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
  return stmt;
}

absl::StatusOr<std::unique_ptr<Stmt>> Parser::ParseCallBlock(const Token& at) {
  auto stmt = NewStmt(Stmt::Kind::kCallBlock, at);
  if (IsOp("(")) {
    if (absl::Status s = ParseParams(stmt.get()); !s.ok()) return s;
  }
  auto call = ParseConditional();
  if (!call.ok()) return call.status();
  if ((*call)->kind != Expr::Kind::kCall) return ErrorAt(at, "'{% call %}' needs a macro call");
  stmt->expr = *std::move(call);
  if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
  std::string end;
  if (absl::Status s = ParseBody({"endcall"}, &stmt->body, &end); !s.ok()) return s;
  if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
  return stmt;
}

absl::StatusOr<std::unique_ptr<Stmt>> Parser::ParseFilterBlock(const Token& at) {
  auto stmt = NewStmt(Stmt::Kind::kFilterBlock, at);
  // The body's output is the filters' subject, bound to a name no template can spell.
  auto placeholder = NewExpr(Expr::Kind::kName, at);
  placeholder->name = kFilterBlockInput;
  ExprPtr chain = std::move(placeholder);
  do {
    if (IsOp("|")) Next();
    auto filtered = ParseFilter(std::move(chain));
    if (!filtered.ok()) return filtered.status();
    chain = *std::move(filtered);
  } while (IsOp("|"));
  stmt->expr = std::move(chain);
  if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
  std::string end;
  if (absl::Status s = ParseBody({"endfilter"}, &stmt->body, &end); !s.ok()) return s;
  if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
  return stmt;
}

absl::Status Parser::CheckCalls() const {
  for (const Token* t : called_names_) {
    if (IsKnownGlobal(t->text) || macros_.count(t->text) > 0 || assigned_.count(t->text) > 0 ||
        t->text == "caller") {
      continue;
    }
    return ErrorAt(*t, absl::StrCat("unknown function '", t->text, "()'"));
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens) {
  return internal::Parser(tokens).Run();
}

}  // namespace ridge::jinja
