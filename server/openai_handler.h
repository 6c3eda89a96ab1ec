// POST /v1/completions and /v1/chat/completions: parse and validate the body, build the prompt
// (tokenizer, chat template), submit to the engine, and answer in one JSON body or as SSE.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "engine/request.h"
#include "server/active_requests.h"
#include "server/generation_backend.h"
#include "server/http_types.h"
#include "server/json_output.h"
#include "server/openai_request.h"
#include "server/prometheus_metrics.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ridge {

struct HttpServerOptions;

class OpenAiHandler {
 public:
  // Everything must outlive the handler; `tokenizer`, `chat_template`, `metrics` may be null.
  OpenAiHandler(GenerationBackend* backend, const Tokenizer* tokenizer,
                const ChatTemplate* chat_template, PrometheusMetrics* metrics,
                const HttpServerOptions* options, std::shared_ptr<ActiveRequests> active);

  // Validates and submits the request; the answer comes later (PendingReply, or a StreamBody
  // with "stream": true), produced whenever `wake` has been called. Refusals are ready replies.
  HttpResult Handle(ApiKind kind, const HttpRequest& request, const HttpWake& wake);

  // Body -> engine request; errors carry the param at fault (api_error.h).
  struct Prepared {
    OpenAiRequest api;
    // One engine request per prompt (a completions request may send a list of them; a chat
    // one), each run for n choices.
    std::vector<EngineRequest> engine;
    // Completions with "echo": each prompt as text, before its choices' text.
    std::vector<std::string> echo_text;
  };
  absl::StatusOr<Prepared> Prepare(ApiKind kind, const std::string& body) const;

 private:
  // The ids of completion prompt `prompt` (`param` names it), or with none, of the chat's
  // messages; for a chat with continue_final_message, `continued` gets the final message's text
  // as the prompt ends with it (ChatTemplate::Render).
  absl::StatusOr<std::vector<int32_t>> PromptIds(const OpenAiRequest& api,
                                                 const CompletionPrompt* prompt,
                                                 const std::string& param,
                                                 std::optional<std::string>* continued) const;
  // A completion prompt's text for "echo".
  absl::StatusOr<std::string> EchoText(const CompletionPrompt& prompt,
                                       const std::vector<int32_t>& ids) const;

  GenerationBackend* backend_;
  const Tokenizer* tokenizer_;
  const ChatTemplate* chat_template_;
  // The token each chat message starts with, where the prefix cache keeps states inside a
  // chat prompt (server/turn_boundaries.h); nullopt without a template or when none is found.
  std::optional<int32_t> turn_start_;
  // With --reasoning-parser, the tokens of "<think>" and "</think>" (each a token of its own in
  // the model's vocabulary), which a JSON-constrained chat reply may begin with; -1 otherwise.
  int32_t reasoning_open_ = -1, reasoning_close_ = -1;
  PrometheusMetrics* metrics_;
  const HttpServerOptions* options_;
  std::shared_ptr<ActiveRequests> active_;
  LazyJsonVocabulary json_vocabulary_;  // for response_format json_object
};

}  // namespace ridge
