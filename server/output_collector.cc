#include "server/output_collector.h"

#include "absl/strings/str_cat.h"
#include "server/openai_response.h"

namespace ridge {

OutputDelta Collector::Consume(const RequestEvent& event) {
  OutputDelta delta;
  if (finished_) return delta;
  auto added = assembler_.Add(event);
  if (!added.ok())
    return Finish(absl::InternalError(absl::StrCat("could not decode generated tokens: ",
                                                   std::string(added.status().message()))));
  delta = *std::move(added);
  if (assembler_.stopped() && !cancel_sent_) {
    backend_->Cancel(id_, CancelReason::kStopString);
    cancel_sent_ = true;
    if (include_stop_) delta.text += assembler_.matched_stop();
  }
  if (!event.finished) return delta;
  finished_ = true;
  if (!assembler_.stopped()) {
    auto tail = assembler_.Finish();
    if (!tail.ok()) return Finish(tail.status());
    delta.text += tail->text;
  }
  const RequestUsage& u = event.usage;
  if (assembler_.stopped()) {
    finish_reason_ = "stop";
    usage_ = u;
    usage_.completion_tokens = assembler_.tokens_consumed();
  } else {
    if (!event.status.ok()) {
      status_ = event.status.code() == absl::StatusCode::kDeadlineExceeded
                    ? absl::DeadlineExceededError(absl::StrCat(
                          "the request's deadline (\"timeout\") passed after ", u.completion_tokens,
                          " generated tokens: ", std::string(event.status.message())))
                    : event.status;
    } else if (event.finish_reason == FinishReason::kCancelled ||
               event.finish_reason == FinishReason::kError) {
      status_ = absl::InternalError(
          absl::StrCat("generation ended early: ", FinishReasonName(event.finish_reason)));
    }
    finish_reason_ = OpenAiFinishReason(event.finish_reason);
    usage_ = u;
  }
  return delta;
}

OutputDelta Collector::Finish(absl::Status status) {
  if (!finished_ && !cancel_sent_) backend_->Cancel(id_);
  cancel_sent_ = true;
  finished_ = true;
  status_ = std::move(status);
  return {};
}

}  // namespace ridge
