#include "server/openai_handler.h"

#include <httplib.h>

#include <chrono>
#include <ctime>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "server/api_error.h"
#include "server/chat_output_parser.h"
#include "server/event_queue.h"
#include "server/http_server.h"
#include "server/openai_response.h"
#include "server/output_assembler.h"
#include "server/sse.h"

namespace ridge {
namespace {

using json = nlohmann::ordered_json;

constexpr auto kPoll = std::chrono::milliseconds(100);

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Folds a request's events into client-visible output; cancels the engine request as soon as a
// stop string matches (the engine does not know stop strings).
class Collector {
 public:
  Collector(GenerationBackend* backend, RequestId id, const Tokenizer* tokenizer,
            std::vector<std::string> stops)
      : backend_(backend), id_(id), assembler_(tokenizer, std::move(stops)) {}

  OutputDelta Consume(const RequestEvent& event) {
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
      usage_ = UsageJson(u.prompt_tokens, assembler_.tokens_consumed(), u);
    } else {
      if (!event.status.ok()) {
        status_ =
            event.status.code() == absl::StatusCode::kDeadlineExceeded
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
      usage_ = UsageJson(u.prompt_tokens, u.completion_tokens, u);
    }
    return delta;
  }

  // Cancels the engine request (once), e.g. when the server stops; its final event follows.
  void Cancel(CancelReason reason) {
    if (finished_ || cancel_sent_) return;
    backend_->Cancel(id_, reason);
    cancel_sent_ = true;
  }

  bool finished() const { return finished_; }
  const absl::Status& status() const { return status_; }
  const std::string& finish_reason() const { return finish_reason_; }
  const json& usage() const { return usage_; }

 private:
  OutputDelta Finish(absl::Status status) {
    if (!finished_ && !cancel_sent_) backend_->Cancel(id_);
    cancel_sent_ = true;
    finished_ = true;
    status_ = std::move(status);
    return {};
  }

  GenerationBackend* backend_;
  RequestId id_;
  OutputAssembler assembler_;
  bool finished_ = false;
  bool cancel_sent_ = false;
  absl::Status status_;
  std::string finish_reason_;
  json usage_;
};

void Append(OutputDelta& all, OutputDelta delta) {
  all.text += delta.text;
  all.tokens.insert(all.tokens.end(), delta.tokens.begin(), delta.tokens.end());
  all.logprobs.insert(all.logprobs.end(), std::make_move_iterator(delta.logprobs.begin()),
                      std::make_move_iterator(delta.logprobs.end()));
}

ResponseBuilder::Options BuilderOptions(const OpenAiRequest& api, const HttpServerOptions& server,
                                        const Tokenizer* tokenizer) {
  ResponseBuilder::Options o;
  o.kind = api.kind;
  o.id = ResponseBuilder::NewId(api.kind);
  o.created = static_cast<int64_t>(std::time(nullptr));
  o.model = server.model_id;
  o.reasoning = api.kind == ApiKind::kChat && !server.reasoning_parser.empty();
  o.tokenizer = tokenizer;
  o.logprobs = api.logprobs;
  o.include_usage = api.include_usage;
  o.return_token_ids = api.return_token_ids || tokenizer == nullptr;
  return o;
}

// The parser a chat request's output goes through, or none: reasoning with --reasoning-parser,
// tool calls when the request offers tools and does not say tool_choice "none".
std::optional<ChatOutputParser> OutputParserFor(const OpenAiRequest& api,
                                                const HttpServerOptions& options) {
  if (api.kind != ApiKind::kChat) return std::nullopt;
  ChatOutputParser::Options o;
  o.reasoning = !options.reasoning_parser.empty();
  o.tool_calls = api.chat.has_tools && api.chat.tool_choice.mode != ToolChoice::Mode::kNone;
  if (!o.reasoning && !o.tool_calls) return std::nullopt;
  return ChatOutputParser(o);
}

// "stop" becomes "tool_calls" when the model called tools, as OpenAI reports it.
std::string FinishReasonWithTools(const std::string& reason,
                                  const std::optional<ChatOutputParser>& parser) {
  return reason == "stop" && parser && parser->tool_calls_emitted() > 0 ? "tool_calls" : reason;
}

void AppendChat(ChatDelta& all, ChatDelta delta) {
  all.content += delta.content;
  all.reasoning += delta.reasoning;
  for (ParsedToolCall& call : delta.tool_calls) all.tool_calls.push_back(std::move(call));
}

// Everything a streaming response needs after the handler returns; owned by httplib's content
// provider, so it lives until the response is done or the client is gone.
struct StreamState {
  StreamState(GenerationBackend* backend, RequestId id, std::shared_ptr<EventQueue> queue,
              const Tokenizer* tokenizer, std::vector<std::string> stops,
              ResponseBuilder::Options options, ActiveRequests* active)
      : backend(backend),
        id(id),
        queue(std::move(queue)),
        collector(backend, id, tokenizer, std::move(stops)),
        include_usage(options.include_usage),
        builder(std::move(options)),
        guard(active) {}

  GenerationBackend* backend;
  RequestId id;
  std::shared_ptr<EventQueue> queue;
  Collector collector;
  bool include_usage;
  ResponseBuilder builder;
  std::optional<ChatOutputParser> parser;  // chat: reasoning and tool calls
  bool wants_tokens = false;  // logprobs or token ids: emit chunks even without new text
  bool done = false;
  ActiveRequests::Guard guard;
};

// The SSE bytes for `events`; sets state.done after the last one.
std::string StreamBytes(StreamState& state, const std::vector<RequestEvent>& events) {
  std::string out;
  for (const RequestEvent& event : events) {
    if (state.collector.finished()) break;
    const OutputDelta delta = state.collector.Consume(event);
    const bool tokens = state.wants_tokens && !delta.tokens.empty();
    if (state.parser) {
      ChatDelta parsed = state.parser->Add(delta.text);
      if (state.collector.finished() && state.collector.status().ok()) {
        AppendChat(parsed, state.parser->Finish());
      }
      if (!parsed.empty() || tokens) out += SseEvent(state.builder.Chunk(delta, &parsed));
    } else if (!delta.text.empty() || tokens) {
      out += SseEvent(state.builder.Chunk(delta));
    }
    if (!state.collector.finished()) continue;
    if (state.collector.status().ok()) {
      out += SseEvent(state.builder.FinalChunk(
          FinishReasonWithTools(state.collector.finish_reason(), state.parser)));
      if (state.include_usage) out += SseEvent(state.builder.UsageChunk(state.collector.usage()));
    } else {
      out += SseEvent(ErrorBody(state.collector.status()));
    }
    out += kSseDone;
    state.done = true;
  }
  return out;
}

}  // namespace

OpenAiHandler::OpenAiHandler(GenerationBackend* backend, const Tokenizer* tokenizer,
                             const ChatTemplate* chat_template, PrometheusMetrics* metrics,
                             const HttpServerOptions* options, ActiveRequests* active,
                             const std::atomic<bool>* cancel_all)
    : backend_(backend),
      tokenizer_(tokenizer),
      chat_template_(chat_template),
      metrics_(metrics),
      options_(options),
      active_(active),
      cancel_all_(cancel_all) {}

absl::StatusOr<std::vector<int32_t>> OpenAiHandler::PromptIds(const OpenAiRequest& api) const {
  const char* param = api.kind == ApiKind::kChat ? "messages" : "prompt";
  std::vector<int32_t> ids;
  if (api.prompt_ids) {
    ids = *api.prompt_ids;
  } else if (tokenizer_ == nullptr) {
    return FieldError(param,
                      "is text, but this server has no tokenizer (the model folder has no "
                      "tokenizer.json; start the server with --tokenizer DIR), so only token-id "
                      "prompts work");
  } else if (api.kind == ApiKind::kChat) {
    if (chat_template_ == nullptr) {
      return FieldError(param,
                        "cannot be used: the tokenizer has no chat template "
                        "(tokenizer_config.json \"chat_template\"); use /v1/completions");
    }
    auto text = chat_template_->Render(api.chat.render);
    if (!text.ok()) return WithParam(text.status(), param);
    // The template already wrote the special tokens it wants (BOS included).
    auto encoded = tokenizer_->Encode(*text, /*add_special_tokens=*/false);
    if (!encoded.ok()) return WithParam(encoded.status(), param);
    ids = *std::move(encoded);
  } else {
    auto encoded = tokenizer_->Encode(*api.prompt_text, /*add_special_tokens=*/true);
    if (!encoded.ok()) return WithParam(encoded.status(), param);
    ids = *std::move(encoded);
  }
  if (ids.empty()) return FieldError(param, "holds no tokens; send a non-empty prompt");
  if (static_cast<int64_t>(ids.size()) > options_->max_prompt_tokens) {
    return WithParam(absl::OutOfRangeError(absl::StrCat("the prompt has ", ids.size(),
                                                        " tokens; this server accepts at most ",
                                                        options_->max_prompt_tokens)),
                     param);
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= options_->limits.vocab_size) {
      return FieldError(
          param, absl::StrCat("encodes to token id ", id, ", outside the model's vocabulary of ",
                              options_->limits.vocab_size, " (tokenizer and model do not match)"));
    }
  }
  return ids;
}

absl::StatusOr<OpenAiHandler::Prepared> OpenAiHandler::Prepare(ApiKind kind,
                                                               const std::string& body) const {
  const auto arrival = std::chrono::steady_clock::now();
  nlohmann::ordered_json parsed;
  try {
    parsed = nlohmann::ordered_json::parse(body);
  } catch (const nlohmann::ordered_json::out_of_range& e) {  // e.g. a number beyond a double: 1e400
    return absl::InvalidArgumentError(absl::StrCat("the request body holds a value out of range (",
                                                   e.what(), "); send a JSON object"));
  } catch (const nlohmann::ordered_json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request body is not valid JSON (or not UTF-8): ", e.what(), "; send a JSON object"));
  }
  Prepared p;
  ASSIGN_OR_RETURN(p.api, ParseOpenAiRequest(parsed, kind, options_->limits));
  if (!p.api.model.empty() && p.api.model != options_->model_id) {
    return WithParam(absl::NotFoundError(absl::StrCat("the model '", p.api.model,
                                                      "' does not exist; this server serves '",
                                                      options_->model_id, "'")),
                     "model");
  }
  ASSIGN_OR_RETURN(p.engine.prompt, PromptIds(p.api));
  p.engine.sampling = p.api.sampling;
  p.engine.max_tokens_defaulted = p.api.max_tokens_defaulted;
  if (p.api.solver_tolerance || p.api.solver_max_iterations) {
    p.engine.solver = SolverOptions{
        p.api.solver_tolerance.value_or(options_->default_solver.tolerance),
        p.api.solver_max_iterations.value_or(options_->default_solver.max_iterations)};
  }
  p.engine.logprobs = p.api.logprobs;
  p.engine.top_logprobs = p.api.top_logprobs;
  if (p.api.timeout_seconds) {
    p.engine.deadline = arrival + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double>(*p.api.timeout_seconds));
  }
  return p;
}

void OpenAiHandler::Fail(const absl::Status& status, httplib::Response& response) const {
  response.status = HttpStatusFor(status);
  if (response.status == 429 || response.status == 503) response.set_header("Retry-After", "1");
  response.set_content(Dump(ErrorBody(status)), "application/json");
}

void OpenAiHandler::Handle(ApiKind kind, const httplib::Request& request,
                           httplib::Response& response) {
  auto prepared = Prepare(kind, request.body);
  if (!prepared.ok()) {
    if (metrics_ != nullptr) metrics_->OnRejected(prepared.status());
    Log(LogLevel::kDebug, request.path, ": rejected: ", prepared.status().ToString());
    return Fail(prepared.status(), response);
  }
  auto queue = std::make_shared<EventQueue>();
  // The engine reports its own refusals (queue full, draining) to the metrics observer.
  auto id = backend_->Submit(prepared->engine, queue);
  if (!id.ok()) {
    Log(LogLevel::kDebug, request.path, ": engine refused: ", id.status().ToString());
    return Fail(WithParamFromMessage(id.status()), response);
  }
  Log(LogLevel::kDebug, request.path, ": request ", *id, ", ", prepared->engine.prompt.size(),
      " prompt tokens", prepared->api.stream ? ", streaming" : "");
  if (prepared->api.stream) {
    Stream(*std::move(prepared), *id, std::move(queue), response);
  } else {
    Reply(*prepared, *id, queue, response);
  }
}

void OpenAiHandler::Reply(const Prepared& prepared, RequestId id,
                          const std::shared_ptr<EventQueue>& queue, httplib::Response& response) {
  ActiveRequests::Guard guard(active_);
  Collector collector(backend_, id, tokenizer_, prepared.api.stop);
  OutputDelta all;
  while (!collector.finished()) {
    if (cancel_all_->load()) collector.Cancel(CancelReason::kShutdown);
    for (const RequestEvent& event : queue->Wait(kPoll)) Append(all, collector.Consume(event));
  }
  if (!collector.status().ok()) return Fail(collector.status(), response);
  ResponseBuilder builder(BuilderOptions(prepared.api, *options_, tokenizer_));
  std::optional<ChatOutputParser> parser = OutputParserFor(prepared.api, *options_);
  if (!parser) {
    response.set_content(Dump(builder.Full(all, collector.finish_reason(), collector.usage())),
                         "application/json");
    return;
  }
  ChatDelta parsed = parser->Add(all.text);
  AppendChat(parsed, parser->Finish());
  response.set_content(
      Dump(builder.Full(all, FinishReasonWithTools(collector.finish_reason(), parser),
                        collector.usage(), &parsed)),
      "application/json");
}

void OpenAiHandler::Stream(Prepared prepared, RequestId id, std::shared_ptr<EventQueue> queue,
                           httplib::Response& response) {
  auto state =
      std::make_shared<StreamState>(backend_, id, std::move(queue), tokenizer_, prepared.api.stop,
                                    BuilderOptions(prepared.api, *options_, tokenizer_), active_);
  state->parser = OutputParserFor(prepared.api, *options_);
  state->wants_tokens =
      prepared.api.logprobs || prepared.api.return_token_ids || tokenizer_ == nullptr;
  response.set_header("Cache-Control", "no-cache");
  response.set_header("X-Accel-Buffering", "no");
  response.set_chunked_content_provider(
      "text/event-stream",
      [state, cancel_all = cancel_all_](size_t /*offset*/, httplib::DataSink& sink) {
        if (state->done) {
          sink.done();
          return true;
        }
        if (cancel_all->load()) state->collector.Cancel(CancelReason::kShutdown);
        const std::string bytes = StreamBytes(*state, state->queue->Wait(kPoll));
        // A failed write means the client is gone: returning false ends the response, and the
        // releaser cancels the engine request.
        if (!bytes.empty() && !sink.write(bytes.data(), bytes.size())) return false;
        if (state->done) sink.done();
        return true;
      },
      [state](bool /*success*/) {
        if (!state->collector.finished()) {
          Log(LogLevel::kDebug, "request ", state->id, ": client gone, cancelling");
          state->backend->Cancel(state->id);
        }
      });
}

}  // namespace ridge
