// The model's vocabulary as bytes for JSON-constrained output (response_format json_object):
// each token's bytes from the tokenizer, none for special tokens and for ids past the
// tokenizer's vocabulary (a model's embedding table is often padded beyond it).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "absl/status/statusor.h"
#include "sampling/json_constraint.h"
#include "tokenizer/tokenizer.h"

namespace ridge {

absl::StatusOr<std::shared_ptr<const JsonVocabulary>> JsonVocabularyOf(const Tokenizer& tokenizer,
                                                                       int32_t model_vocab_size);

// What a transport hands its JSON-mode requests: the vocabulary made on the first such request
// (about 150 ms for 150K tokens, not paid at start-up by servers that never see one) and kept.
// Thread-safe. Without a tokenizer, every request gets an error saying so.
class LazyJsonVocabulary {
 public:
  // `tokenizer` (may be null) must outlive this.
  LazyJsonVocabulary(const Tokenizer* tokenizer, int32_t model_vocab_size)
      : tokenizer_(tokenizer), model_vocab_size_(model_vocab_size) {}
  absl::StatusOr<std::shared_ptr<const JsonVocabulary>> Get() const;

 private:
  const Tokenizer* tokenizer_;
  int32_t model_vocab_size_;
  mutable std::once_flag once_;
  mutable absl::StatusOr<std::shared_ptr<const JsonVocabulary>> vocabulary_;
};

}  // namespace ridge
