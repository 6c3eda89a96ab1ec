// Turns a request's generated token ids into the text a client sees: incremental detokenization
// (never a broken UTF-8 character), then stop strings (text truncated before the match). Runs
// on the transport's thread, never on the engine's. Ids the tokenizer does not know (a model's
// padded vocabulary) produce no text.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/request.h"
#include "server/stop_matcher.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace ridge {

struct OutputDelta {
  std::string text;
  std::vector<int32_t> tokens;         // the tokens this delta consumed
  std::vector<LogprobEntry> logprobs;  // theirs, when the request asked for logprobs
};

class OutputAssembler {
 public:
  // `tokenizer` may be null (token ids only: text stays empty); it must outlive this object.
  // Stop strings match only from the min_tokens-th token's text on (vLLM's min_tokens).
  OutputAssembler(const Tokenizer* tokenizer, std::vector<std::string> stops,
                  bool skip_special_tokens = true, int32_t min_tokens = 0);

  // Consumes an event's tokens up to a stop-string match; later tokens are dropped.
  absl::StatusOr<OutputDelta> Add(const RequestEvent& event);
  // Releases held-back text at the end of generation.
  absl::StatusOr<OutputDelta> Finish();

  bool stopped() const { return matcher_.stopped(); }  // a stop string matched
  const std::string& matched_stop() const { return matcher_.matched(); }
  int64_t tokens_consumed() const { return tokens_consumed_; }

 private:
  const Tokenizer* tokenizer_;
  std::optional<IncrementalDecoder> decoder_;
  StopStringMatcher matcher_;
  int32_t min_tokens_;
  int64_t tokens_consumed_ = 0;
};

}  // namespace ridge
