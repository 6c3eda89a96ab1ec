#include "server/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace ridge {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopStringMatcher::Add(std::string_view piece, bool may_match) {
  if (stopped_) return "";
  pending_.append(piece);
  if (stops_.empty()) return std::exchange(pending_, {});

  size_t best = std::string::npos;
  if (may_match) {
    for (const std::string& stop : stops_) {
      const size_t at = pending_.find(stop);
      if (at < best) {
        best = at;
        matched_ = stop;
      }
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, best);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t keep_from = pending_.size();
  for (const std::string& stop : stops_) {
    const size_t longest = std::min(stop.size() - 1, pending_.size());
    for (size_t len = longest; len > 0; --len) {
      if (pending_.compare(pending_.size() - len, len, stop, 0, len) == 0) {
        keep_from = std::min(keep_from, pending_.size() - len);
        break;
      }
    }
  }
  std::string out = pending_.substr(0, keep_from);
  pending_.erase(0, keep_from);
  return out;
}

std::string StopStringMatcher::Flush() {
  if (stopped_) return "";
  return std::exchange(pending_, {});
}

}  // namespace ridge
