// Streaming detokenization: feed generated ids one at a time, get back only text that is final.
// Text is held back while the decoded window ends in an unfinished UTF-8 sequence (a character
// split across byte tokens, or byte-fallback pieces still arriving), so no broken character is
// ever emitted, and Finish() releases the rest, so no byte is ever dropped: the concatenation of
// all returned pieces equals Tokenizer::Decode of all ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace ridge {

class IncrementalDecoder {
 public:
  // `tokenizer` must outlive the decoder.
  IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
      : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // Adds one id and returns the newly final text (often empty). An unknown id is an error and
  // leaves the decoder unchanged.
  absl::StatusOr<std::string> Add(int32_t id);
  // Returns all text not yet returned (unfinished sequences decode as U+FFFD, as in Decode).
  absl::StatusOr<std::string> Finish();

 private:
  // Decodes ids_[prefix_offset_, read_offset_) and ids_[prefix_offset_, end).
  absl::Status DecodeWindow(std::string* before, std::string* after) const;

  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;
  // Decoding restarts at prefix_offset_ (a token before the first unreturned one) so that
  // decoders that look at neighbouring tokens (leading-space stripping, byte runs) see context;
  // text up to read_offset_ has been returned.
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
};

}  // namespace ridge
