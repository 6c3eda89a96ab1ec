// tokenizer.json "normalizer": rewrites text before pre-tokenization. Supported: NFC, NFD, NFKC,
// NFKD (through ICU), Prepend, Replace (string or regex), Strip, Sequence. Anything else is
// rejected at load time, since silently skipping a normalizer would change every id.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tokenizer/json_fields.h"

namespace ridge {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites *text (valid UTF-8) in place.
  virtual void Normalize(std::string* text) const = 0;
};

// A null normalizer in the file gives nullptr.
absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const Json& json);

}  // namespace ridge
