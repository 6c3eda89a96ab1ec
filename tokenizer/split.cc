#include "tokenizer/split.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ridge {
namespace {

struct Segment {
  size_t begin;
  size_t end;
  bool is_match;
};

}  // namespace

absl::StatusOr<SplitBehavior> ParseSplitBehavior(std::string_view name) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown split behavior '", std::string(name), "'"));
}

std::vector<MatchRange> SplitByMatches(size_t text_size, const std::vector<MatchRange>& matches,
                                       SplitBehavior behavior, bool invert) {
  // The text as alternating gaps and matches covering it entirely.
  std::vector<Segment> segments;
  segments.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const MatchRange& m : matches) {
    if (m.begin > prev) segments.push_back({prev, m.begin, invert});
    segments.push_back({m.begin, m.end, !invert});
    prev = m.end;
  }
  if (prev < text_size) segments.push_back({prev, text_size, invert});

  std::vector<MatchRange> out;
  out.reserve(segments.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Segment& s : segments) out.push_back({s.begin, s.end});
      break;
    case SplitBehavior::kRemoved:
      for (const Segment& s : segments) {
        if (!s.is_match) out.push_back({s.begin, s.end});
      }
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Segment& s : segments) {
        if (s.is_match == previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Segment& s : segments) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().end = s.end;
        } else {
          out.push_back({s.begin, s.end});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      // Walks right to left: a delimiter joins the piece that follows it.
      bool previous_match = false;
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back({it->begin, it->end});
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  return out;
}

}  // namespace ridge
