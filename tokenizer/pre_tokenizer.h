// tokenizer.json "pre_tokenizer": splits normalized text into the words the model encodes one
// by one. Supported: ByteLevel, Split, Metaspace, Digits, Whitespace, WhitespaceSplit, Sequence.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/json_fields.h"

namespace ridge {

// A stretch of text on its way through the pipeline.
struct Piece {
  std::string text;
  // Whether the piece begins at offset 0 of the original input: Metaspace's "first" prepend
  // scheme adds its space only there.
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces *pieces with their sub-pieces, in order; empty pieces are dropped.
  virtual void PreTokenize(std::vector<Piece>* pieces) const = 0;
};

// A null pre_tokenizer in the file gives nullptr.
absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const Json& json);

}  // namespace ridge
