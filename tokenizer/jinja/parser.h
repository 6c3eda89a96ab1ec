// Tokens -> syntax tree. Everything the evaluator cannot run (unknown statements, filters, tests,
// functions, methods) is an error here, with the line and column, so a template either loads and
// can render every request or fails at start-up.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace ridge::jinja {

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens);

}  // namespace ridge::jinja
