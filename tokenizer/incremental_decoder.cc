#include "tokenizer/incremental_decoder.h"

#include <span>

#include "base/status_macros.h"
#include "tokenizer/utf8.h"

namespace ridge {
namespace {

constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

bool EndsWithReplacement(const std::string& s) {
  return s.size() >= kReplacementUtf8.size() &&
         s.compare(s.size() - kReplacementUtf8.size(), kReplacementUtf8.size(), kReplacementUtf8) ==
             0;
}

// The part of `after` beyond `before`, cut at a character boundary. Decoders only ever extend
// the text of a window, so normally `after` starts with `before`; if not, the longest common
// prefix keeps output from repeating.
std::string Delta(const std::string& before, const std::string& after) {
  size_t common = 0;
  while (common < before.size() && common < after.size() && before[common] == after[common]) {
    ++common;
  }
  while (common > 0 && common < after.size() &&
         (static_cast<unsigned char>(after[common]) & 0xC0) == 0x80) {
    --common;
  }
  return after.substr(common);
}

}  // namespace

absl::Status IncrementalDecoder::DecodeWindow(std::string* before, std::string* after) const {
  const std::span<const int32_t> all(ids_);
  ASSIGN_OR_RETURN(*before,
                   tokenizer_.Decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_),
                                     skip_special_tokens_));
  ASSIGN_OR_RETURN(*after, tokenizer_.Decode(all.subspan(prefix_offset_), skip_special_tokens_));
  return absl::OkStatus();
}

absl::StatusOr<std::string> IncrementalDecoder::Add(int32_t id) {
  if (!tokenizer_.IdToToken(id)) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", id, " is not in the vocabulary"));
  }
  ids_.push_back(id);
  std::string before, after;
  RETURN_IF_ERROR(DecodeWindow(&before, &after));
  // A trailing U+FFFD may be a character whose remaining bytes are still to come: wait.
  if (after.size() <= before.size() || EndsWithReplacement(after)) return std::string();
  std::string delta = Delta(before, after);
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  // Ids before the window are never decoded again; drop them now and then on long streams.
  if (prefix_offset_ >= 4096) {
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_));
    read_offset_ -= prefix_offset_;
    prefix_offset_ = 0;
  }
  return delta;
}

absl::StatusOr<std::string> IncrementalDecoder::Finish() {
  std::string before, after;
  RETURN_IF_ERROR(DecodeWindow(&before, &after));
  std::string delta = after.size() > before.size() ? Delta(before, after) : std::string();
  ids_.clear();
  prefix_offset_ = 0;
  read_offset_ = 0;
  return delta;
}

}  // namespace ridge
