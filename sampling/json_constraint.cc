#include "sampling/json_constraint.h"

#include <algorithm>
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

void JsonVocabulary::Allowed(const JsonByteState& state, std::vector<uint8_t>* allowed) const {
  TokenBits bits((vocab_size_ + 63) / 64, 0);
  TokenTrie::WalkStack stack;
  trie_.Walk(state, &bits, &stack);
  allowed->assign(vocab_size_, 0);
  for (int32_t id = 0; id < vocab_size_; ++id) (*allowed)[id] = (bits[id / 64] >> (id % 64)) & 1u;
}

std::shared_ptr<const TokenBits> JsonVocabulary::AllowedBits(const JsonByteState& state) const {
  const JsonStateKey key = state.key();
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    for (CachedMask& entry : cache_) {
      if (entry.key == key) {
        entry.last_use = ++uses_;
        return entry.bits;
      }
    }
  }
  auto bits = std::make_shared<TokenBits>((vocab_size_ + 63) / 64, 0);
  TokenTrie::WalkStack stack;
  if (state.in_string_body()) {
    *bits = string_stays_;
    string_exits_.Walk(state, bits.get(), &stack);
  } else {
    trie_.Walk(state, bits.get(), &stack);
  }
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() < kCachedStates) {
    cache_.push_back({key, bits, ++uses_});
  } else {
    auto oldest = std::min_element(cache_.begin(), cache_.end(), [](const auto& a, const auto& b) {
      return a.last_use < b.last_use;
    });
    *oldest = {key, bits, ++uses_};
  }
  return bits;
}

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonVocabulary> vocabulary,
                               std::vector<int32_t> end_ids)
    : vocabulary_(std::move(vocabulary)), end_ids_(std::move(end_ids)) {
  std::sort(end_ids_.begin(), end_ids_.end());
  end_ids_.erase(std::unique(end_ids_.begin(), end_ids_.end()), end_ids_.end());
  RIDGE_CHECK(!end_ids_.empty());
  end_bits_.assign((vocabulary_->vocab_size() + 63) / 64, 0);
  for (int32_t id : end_ids_) {
    RIDGE_CHECK(id >= 0 && id < vocabulary_->vocab_size());
    end_bits_[id / 64] |= uint64_t{1} << (id % 64);
  }
}

int32_t JsonConstraint::MaskLogits(std::span<float> logits) {
  RIDGE_CHECK(logits.size() == static_cast<size_t>(vocabulary_->vocab_size()));
  constexpr float kRefused = -std::numeric_limits<float>::infinity();
  if (!state_.complete()) {
    // The end tokens are refused until the object is complete: a special token has no bytes,
    // but one that is text (a stop token) must not slip into the object either.
    const std::shared_ptr<const TokenBits> bits = vocabulary_->AllowedBits(state_);
    int32_t lowest = -1;
    for (size_t word = 0; word < bits->size() && lowest < 0; ++word) {
      const uint64_t going_on = (*bits)[word] & ~end_bits_[word];
      if (going_on != 0) lowest = static_cast<int32_t>(word * 64 + std::countr_zero(going_on));
    }
    if (lowest >= 0) {
      for (size_t word = 0; word < bits->size(); ++word) {
        const uint64_t keep = (*bits)[word] & ~end_bits_[word];
        const size_t begin = word * 64, end = std::min(begin + 64, logits.size());
        if (keep == 0) {
          std::fill(logits.begin() + begin, logits.begin() + end, kRefused);
          continue;
        }
        for (size_t id = begin; id < end; ++id) {
          if (((keep >> (id - begin)) & 1u) == 0) logits[id] = kRefused;
        }
      }
      return lowest;
    }
  }
  // Only an end token: they keep their logits, the rest are refused.
  std::vector<float> end_logits;
  for (int32_t id : end_ids_) end_logits.push_back(logits[id]);
  std::fill(logits.begin(), logits.end(), kRefused);
  for (size_t i = 0; i < end_ids_.size(); ++i) logits[end_ids_[i]] = end_logits[i];
  return end_ids_.front();
}

void JsonConstraint::Accept(int32_t token) {
  RIDGE_CHECK(token >= 0 && token < vocabulary_->vocab_size());
  if (state_.complete() || ((end_bits_[token / 64] >> (token % 64)) & 1u) != 0) return;
  for (char c : vocabulary_->bytes(token)) {
    const bool fits = state_.Step(static_cast<uint8_t>(c));
    RIDGE_CHECK(fits);  // MaskLogits allowed only tokens that fit
  }
}

}  // namespace ridge
