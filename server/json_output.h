// The model's vocabulary as bytes for JSON-constrained output (response_format json_object):
// each token's bytes from the tokenizer, none for special tokens and for ids past the
// tokenizer's vocabulary (a model's embedding table is often padded beyond it).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "sampling/json_constraint.h"
#include "tokenizer/tokenizer.h"

namespace ridge {

absl::StatusOr<std::shared_ptr<const JsonVocabulary>> JsonVocabularyOf(const Tokenizer& tokenizer,
                                                                       int32_t model_vocab_size);

}  // namespace ridge
