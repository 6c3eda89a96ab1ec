#include "server/output_assembler.h"

#include "base/status_macros.h"

namespace ridge {

OutputAssembler::OutputAssembler(const Tokenizer* tokenizer, std::vector<std::string> stops,
                                 bool skip_special_tokens, int32_t min_tokens)
    : tokenizer_(tokenizer), matcher_(std::move(stops)), min_tokens_(min_tokens) {
  if (tokenizer_ != nullptr) decoder_.emplace(*tokenizer_, skip_special_tokens);
}

absl::StatusOr<OutputDelta> OutputAssembler::Add(const RequestEvent& event) {
  OutputDelta delta;
  for (size_t i = 0; i < event.tokens.size() && !matcher_.stopped(); ++i) {
    const int32_t id = event.tokens[i];
    delta.tokens.push_back(id);
    if (i < event.logprobs.size()) delta.logprobs.push_back(event.logprobs[i]);
    ++tokens_consumed_;
    // Models often have more embedding rows than the tokenizer has tokens (padding to a
    // multiple of 64, say); such ids name no text and decode to nothing, as in vLLM.
    if (decoder_ && tokenizer_->IdToToken(id).has_value()) {
      ASSIGN_OR_RETURN(const std::string piece, decoder_->Add(id));
      delta.text += matcher_.Add(piece, tokens_consumed_ >= min_tokens_);
    }
  }
  return delta;
}

absl::StatusOr<OutputDelta> OutputAssembler::Finish() {
  OutputDelta delta;
  if (decoder_ && !matcher_.stopped()) {
    ASSIGN_OR_RETURN(const std::string rest, decoder_->Finish());
    delta.text += matcher_.Add(rest, tokens_consumed_ >= min_tokens_);
    delta.text += matcher_.Flush();
  }
  return delta;
}

}  // namespace ridge
