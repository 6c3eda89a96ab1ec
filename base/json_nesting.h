// How deep a JSON text nests, found without parsing it. nlohmann::json parses any depth without
// recursion, but copying, comparing and dumping a value recurse once per level: a request body
// of a million '[' parses, then crashes the server the first time an error message quotes it.
// Every JSON text from outside is checked with this before it is parsed.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace ridge {

// The most containers ('[' and '{' outside strings) a JSON text from outside may have open at
// once: far above any real request (a tool's parameter schema nests a few levels), far below
// what recursion over a parsed value can take.
inline constexpr int kMaxJsonInputNesting = 128;

// True when `text` opens more than `limit` containers at once. Reads strings (and their escapes)
// so that brackets inside them do not count; says nothing else about whether `text` is JSON.
bool JsonNestsDeeperThan(std::string_view text, int limit);

// InvalidArgument "<what> nests deeper than <limit> levels" when `text` does; OK otherwise.
absl::Status CheckJsonNesting(std::string_view text, int limit, const char* what);

}  // namespace ridge
