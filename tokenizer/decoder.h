// tokenizer.json "decoder": turns tokens back into text. Supported: ByteLevel, Metaspace,
// Replace, ByteFallback, Fuse, Strip, Sequence — each reproducing `tokenizers`' decode_chain,
// quirks included (Metaspace drops every replacement char of the first token; ByteFallback
// writes one U+FFFD per byte of an invalid run).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/json_fields.h"

namespace ridge {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the token list; the decoded text is the concatenation of the final list.
  virtual void DecodeChain(std::vector<std::string>* tokens) const = 0;
};

// A null decoder in the file gives nullptr (tokens are then joined with spaces).
absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const Json& json);

}  // namespace ridge
