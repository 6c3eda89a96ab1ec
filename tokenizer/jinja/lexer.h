// Jinja source -> tokens, with the whitespace handling transformers renders chat templates with:
// trim_blocks (the newline after a block or comment tag is dropped), lstrip_blocks (spaces and
// tabs before a block or comment tag on its own line are dropped), "-" (all whitespace on that
// side is dropped), "+" (lstrip_blocks / trim_blocks off for that side), and Jinja's default of
// dropping one trailing newline of the template.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ridge::jinja {

struct Token {
  enum class Type {
    kText,        // literal output between tags
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,        // identifiers and keywords
    kString,      // a string literal, unescaped
    kInt,
    kFloat,
    kOperator,  // + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
    kEnd,
  };
  Type type;
  std::string text;
  int line = 1;
  int column = 1;
};

// Errors are InvalidArgument "line L, column C: ...".
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace ridge::jinja
