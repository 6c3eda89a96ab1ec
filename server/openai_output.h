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

// Where a choice comes from: its engine request and its prompt.
struct ChoiceSource {
  RequestId id = 0;
  std::string echo_text;           // completions with "echo": its prompt, before its text
  int32_t first_prompt_token = 0;  // the prompt's first token (prompt logprobs start after it)
};

struct Choice {
  Choice(GenerationBackend* backend, ChoiceSource source, const Tokenizer* tokenizer,
         const OpenAiRequest& api, ResponseBuilder::Options options,
         std::optional<ChatOutputParser> parser)
      : collector(backend, source.id, tokenizer, api.stop, api.include_stop_str_in_output,
                  api.sampling.min_tokens),
        builder(std::move(options)),
        parser(std::move(parser)),
        echo_text(std::move(source.echo_text)) {
    prompt.first_token = source.first_prompt_token;
  }

  Collector collector;
  ResponseBuilder builder;
  std::optional<ChatOutputParser> parser;
  std::string echo_text;
  PromptScores prompt;  // its prompt logprobs, once the first event brought them
  OutputDelta all;      // unary: everything so far
  bool echoed = false;  // streams: the prompt was sent (echo)
  bool final_sent = false;
};

class ChoiceSet {
 public:
  // One choice per source, in order (its "index"); `options` is shared but for each choice's
  // index.
  ChoiceSet(GenerationBackend* backend, const Tokenizer* tokenizer, const OpenAiRequest& api,
            const ResponseBuilder::Options& options, const std::optional<ChatOutputParser>& parser,
            std::vector<ChoiceSource> sources);

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

  // Takes the prompt logprobs an event carries (the first of its choice's).
  static void TakePromptScores(Choice& c, const RequestEvent& event);

  std::vector<std::unique_ptr<Choice>> choices_;
  bool echo_ = false;                  // completions with "echo"
  bool echo_logprobs_ = false;         // ... and logprobs: the echo waits for the prompt's logprobs
  bool chat_prompt_logprobs_ = false;  // chat with prompt_logprobs: the response carries them
  int32_t prompt_logprobs_ = 0;
  const Tokenizer* tokenizer_;
  bool done_ = false;
};

}  // namespace ridge
