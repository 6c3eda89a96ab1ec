// What a completion or chat request's engine output becomes for its client: one Choice per engine
// request (n of them for "n": n, sharing one event queue), each with its collector (text, stop
// strings, finish reason, usage), response builder and chat output parser (reasoning, tool
// calls); folded into one JSON body (unary) or server-sent events (streams).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/request.h"
#include "nlohmann/json.hpp"
#include "server/chat_output_parser.h"
#include "server/generation_backend.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/output_collector.h"

namespace ridge {

struct Choice {
  Choice(GenerationBackend* backend, RequestId id, const Tokenizer* tokenizer,
         const OpenAiRequest& api, ResponseBuilder::Options options,
         std::optional<ChatOutputParser> parser)
      : collector(backend, id, tokenizer, api.stop, api.include_stop_str_in_output),
        builder(std::move(options)),
        parser(std::move(parser)) {}

  Collector collector;
  ResponseBuilder builder;
  std::optional<ChatOutputParser> parser;
  OutputDelta all;      // unary: everything so far
  bool echoed = false;  // streams: the prompt was sent (echo)
  bool final_sent = false;
};

class ChoiceSet {
 public:
  // One choice per id, in order; `options` is shared but for each choice's index. `echo_text`
  // (completions with "echo") comes before each choice's text.
  ChoiceSet(GenerationBackend* backend, const Tokenizer* tokenizer, const OpenAiRequest& api,
            const ResponseBuilder::Options& options, const std::optional<ChatOutputParser>& parser,
            const std::vector<RequestId>& ids, std::string echo_text);

  // Routes an event to its choice (unary: appends to its output).
  void ConsumeUnary(const RequestEvent& event);
  // The SSE bytes for `events`, each choice's last chunk when it ends, and after the last one
  // the usage chunk (include_usage) and [DONE]; an error in any choice ends the stream with an
  // error event and cancels the others.
  std::string StreamBytes(const std::vector<RequestEvent>& events);

  bool finished() const;               // every choice has its final event
  bool done() const { return done_; }  // streams: [DONE] was written
  void Cancel(CancelReason reason);    // the unfinished choices
  absl::Status status() const;         // the first choice's error, or OK
  // The whole unary body once finished and OK.
  nlohmann::ordered_json UnaryBody();

  bool wants_tokens = false;  // logprobs or token ids: stream chunks even without new text
  bool include_usage = false;

 private:
  Choice* Find(RequestId id);
  nlohmann::ordered_json Usage() const;  // prompt once, completions summed, solvers merged

  std::vector<std::unique_ptr<Choice>> choices_;
  std::string echo_text_;
  bool done_ = false;
};

}  // namespace ridge
