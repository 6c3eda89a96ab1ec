#include "base/json_nesting.h"

#include "absl/strings/str_cat.h"

namespace ridge {

bool JsonNestsDeeperThan(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > limit) return true;
        break;
      case ']':
      case '}':
        --depth;
        break;
      default:
        break;
    }
  }
  return false;
}

absl::Status CheckJsonNesting(std::string_view text, int limit, const char* what) {
  if (!JsonNestsDeeperThan(text, limit)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " nests deeper than ", limit, " levels"));
}

}  // namespace ridge
