// Turns pattern matches into pieces, with the delimiter behaviours of Hugging Face's
// SplitDelimiterBehavior (Split pre-tokenizer, Metaspace's split on its replacement).
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/regex.h"

namespace ridge {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

absl::StatusOr<SplitBehavior> ParseSplitBehavior(std::string_view name);

// Splits [0, text_size) around `matches` (sorted, non-overlapping). With `invert` the matches
// are the pieces to keep and the gaps the delimiters. Returns the kept ranges, empty ones
// included (callers drop them, as `tokenizers` does).
std::vector<MatchRange> SplitByMatches(size_t text_size, const std::vector<MatchRange>& matches,
                                       SplitBehavior behavior, bool invert);

}  // namespace ridge
