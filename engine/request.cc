#include "engine/request.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ridge {

absl::Status ValidateSessionId(std::string_view id) {
  const bool allowed = !id.empty() && id.size() <= 128 && id[0] != '.' &&
                       std::all_of(id.begin(), id.end(), [](char c) {
                         return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
                       });
  if (allowed) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("session_id '", std::string(id.substr(0, 140)),
                   "' must be 1 to 128 of A-Z a-z 0-9 _ . - and not start with '.'"));
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

std::vector<int32_t> OutputEndTokens(const std::vector<int64_t>& eos_token_ids,
                                     const SamplingParams& sampling) {
  std::vector<int32_t> ends = sampling.stop_token_ids;
  if (!sampling.ignore_eos) {
    for (int64_t id : eos_token_ids) ends.push_back(static_cast<int32_t>(id));
  }
  return ends;
}

}  // namespace ridge
