// Folds one engine request's events into what its client sees: text (incremental decoding, stop
// strings), the finish reason, the error if it failed, and usage. Runs on the transport's thread.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/request.h"
#include "server/generation_backend.h"
#include "server/output_assembler.h"
#include "tokenizer/tokenizer.h"

namespace ridge {

// Folds a request's events into client-visible output; cancels the engine request as soon as a
// stop string matches (the engine does not know stop strings).
class Collector {
 public:
  // include_stop: a matched stop string is part of the output (vLLM's
  // include_stop_str_in_output). Stop strings match from the min_tokens-th token's text on.
  Collector(GenerationBackend* backend, RequestId id, const Tokenizer* tokenizer,
            std::vector<std::string> stops, bool include_stop = false, int32_t min_tokens = 0)
      : backend_(backend),
        id_(id),
        include_stop_(include_stop),
        assembler_(tokenizer, std::move(stops), /*skip_special_tokens=*/true, min_tokens) {}

  OutputDelta Consume(const RequestEvent& event);
  // Cancels the engine request (once), e.g. when the server stops; its final event follows.
  void Cancel(CancelReason reason) {
    if (finished_ || cancel_sent_) return;
    backend_->Cancel(id_, reason);
    cancel_sent_ = true;
  }

  bool finished() const { return finished_; }
  const absl::Status& status() const { return status_; }
  const std::string& finish_reason() const { return finish_reason_; }
  RequestId id() const { return id_; }
  // Usage once finished; completion_tokens counts the tokens up to a stop string's end.
  const RequestUsage& usage() const { return usage_; }

 private:
  OutputDelta Finish(absl::Status status);

  GenerationBackend* backend_;
  RequestId id_;
  bool include_stop_;
  OutputAssembler assembler_;
  bool finished_ = false;
  bool cancel_sent_ = false;
  absl::Status status_;
  std::string finish_reason_;
  RequestUsage usage_;
};

}  // namespace ridge
