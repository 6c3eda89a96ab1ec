// tokenizer.json "added_tokens": tokens matched in the raw text before any BPE, special ones
// (<|im_start|>, <s>) and plain ones alike. Matching is leftmost-longest, as the Aho-Corasick
// automaton of `tokenizers` does, with its single_word / lstrip / rstrip options.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/normalizer.h"

namespace ridge {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// A stretch of text: either an added token (id set) or text still to be tokenized.
struct TextSpan {
  size_t begin;
  size_t end;
  std::optional<int32_t> id;
};

class AddedVocabulary {
 public:
  // `normalizer` (may be null) spells the normalized form that "normalized" tokens match.
  static absl::StatusOr<AddedVocabulary> FromJson(const Json& added_tokens,
                                                  const Normalizer* normalizer);

  // Splits `text` around the tokens with normalized == false (matched on raw text).
  std::vector<TextSpan> SplitRaw(std::string_view text) const { return Split(text, raw_); }
  // Splits normalized `text` around the tokens with normalized == true.
  std::vector<TextSpan> SplitNormalized(std::string_view text) const {
    return Split(text, normalized_);
  }

  const AddedToken* FindById(int32_t id) const;
  std::optional<int32_t> FindByContent(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Literal strings to find, each mapped to the token it stands for.
  struct Matcher {
    absl::flat_hash_map<std::string, size_t> token_of;  // match text -> index in tokens_
    std::vector<size_t> lengths;                        // distinct lengths, longest first
    bool first_byte[256] = {};
  };
  static void AddPattern(Matcher* m, std::string text, size_t token_index);
  std::vector<TextSpan> Split(std::string_view text, const Matcher& m) const;

  std::vector<AddedToken> tokens_;
  absl::flat_hash_map<int32_t, size_t> index_of_id_;
  absl::flat_hash_map<std::string, int32_t> id_of_content_;
  Matcher raw_;
  Matcher normalized_;
};

}  // namespace ridge
