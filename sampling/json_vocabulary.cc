#include "sampling/json_vocabulary.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"

namespace ridge {
namespace {

// Whether `bytes` ends inside a character of several bytes (its last lead byte is followed by
// fewer continuation bytes than it announces).
bool EndsInsideACharacter(const std::string& bytes) {
  int back = 0;  // continuation bytes at the end
  for (size_t i = bytes.size(); i-- > 0;) {
    const auto c = static_cast<uint8_t>(bytes[i]);
    if ((c & 0xC0) != 0x80) {
      const int length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      return back + 1 < length;
    }
    if (++back >= 4) return false;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const JsonVocabulary>> JsonVocabulary::Create(
    std::span<const std::string> token_bytes) {
  if (token_bytes.empty() || token_bytes.size() > (size_t{1} << 30)) {
    return absl::InvalidArgumentError("JSON output: the vocabulary is empty or too large");
  }
  std::shared_ptr<JsonVocabulary> v(new JsonVocabulary());
  v->vocab_size_ = static_cast<int32_t>(token_bytes.size());
  static std::atomic<uint64_t> serials{0};
  v->serial_ = ++serials;
  v->bytes_.assign(token_bytes.begin(), token_bytes.end());

  // A constrained output must never find every token refused: each byte it may need next has a
  // token of its own (the printable ASCII characters; the continuation bytes too when a token
  // ends inside a character).
  std::vector<bool> single(256, false);
  bool split_characters = false;
  for (const std::string& b : v->bytes_) {
    if (b.size() == 1) single[static_cast<uint8_t>(b[0])] = true;
    split_characters = split_characters || EndsInsideACharacter(b);
  }
  for (int c = 0; c < 256; ++c) v->single_byte_[c] = single[c];
  for (int c = 0x20; c < 0x7F; ++c) {
    if (!single[c]) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "JSON output: no token of the vocabulary is the single character '%c' (0x%02X), which "
          "JSON output may need; this tokenizer cannot be constrained to JSON",
          static_cast<char>(c), c));
    }
  }
  if (split_characters) {
    for (int c = 0x80; c < 0xC0; ++c) {
      if (!single[c]) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "JSON output: tokens end inside UTF-8 characters but no token is the byte 0x%02X "
            "alone; this tokenizer cannot be constrained to JSON",
            c));
      }
    }
  }

  std::vector<int32_t> all, exits;
  v->string_stays_.assign((v->vocab_size_ + 63) / 64, 0);
  JsonByteState in_string;
  for (char c : std::string("{\"")) in_string.Step(static_cast<uint8_t>(c));
  for (int32_t id = 0; id < v->vocab_size_; ++id) {
    const std::string& b = v->bytes_[id];
    if (b.empty()) continue;
    all.push_back(id);
    if (b.find_first_of("\"\\") != std::string::npos) {
      exits.push_back(id);
      continue;
    }
    JsonByteState s = in_string;
    bool fits = true;
    for (size_t i = 0; fits && i < b.size(); ++i) fits = s.Step(static_cast<uint8_t>(b[i]));
    if (fits) v->string_stays_[id / 64] |= uint64_t{1} << (id % 64);
  }
  v->trie_ = TokenTrie::Build(v->bytes_, std::move(all));
  v->string_exits_ = TokenTrie::Build(v->bytes_, std::move(exits));
  return std::shared_ptr<const JsonVocabulary>(std::move(v));
}

std::string_view JsonVocabulary::bytes(int32_t id) const {
  RIDGE_CHECK(id >= 0 && id < vocab_size_);
  return bytes_[id];
}

std::shared_ptr<const TokenBits> JsonVocabulary::AllowedBits(const JsonByteState& state) const {
  return object_masks_.Get(state.key(),
                           [&] { return std::make_shared<const TokenBits>(Mask(state)); });
}

}  // namespace ridge
