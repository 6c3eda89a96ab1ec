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

  // The bytes one token adds to decoded text in the middle of it: this decoder on that token
  // alone, without what only acts at the text's start (Metaspace's first-token strip, a Strip
  // after a Fuse) and without replacing invalid UTF-8 (a byte token gives its raw byte).
  // `after_fuse`: a Fuse came earlier in the chain, so the tokens are one text by now.
  virtual std::string PieceBytes(std::string piece, bool after_fuse) const = 0;
  virtual bool fuses() const { return false; }
};

// A null decoder in the file gives nullptr (tokens are then joined with spaces).
absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const Json& json);

}  // namespace ridge
