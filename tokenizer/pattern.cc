#include "tokenizer/pattern.h"

namespace ridge {

absl::StatusOr<std::unique_ptr<Regex>> ParsePattern(const Json& pattern, const char* where) {
  if (pattern.is_object()) {
    auto s = pattern.find("String");
    if (s != pattern.end() && s->is_string()) return Regex::Literal(s->get<std::string>());
    auto r = pattern.find("Regex");
    if (r != pattern.end() && r->is_string()) return Regex::Compile(r->get<std::string>());
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": pattern must be {\"String\": ...} or {\"Regex\": ...}"));
}

}  // namespace ridge
