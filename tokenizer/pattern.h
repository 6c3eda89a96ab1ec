// The {"String": "..."} / {"Regex": "..."} pattern objects of Replace and Split.
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/regex.h"

namespace ridge {

// A String pattern matches literally; a Regex pattern is compiled with PCRE2.
absl::StatusOr<std::unique_ptr<Regex>> ParsePattern(const Json& pattern, const char* where);

}  // namespace ridge
