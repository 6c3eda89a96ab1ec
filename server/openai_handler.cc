#include "server/openai_handler.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <mutex>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/json_nesting.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "sampling/json_constraint.h"
#include "server/api_error.h"
#include "server/chat_output_parser.h"
#include "server/event_queue.h"
#include "server/http_server.h"
#include "server/openai_output.h"
#include "server/openai_response.h"
#include "server/sse.h"
#include "server/turn_boundaries.h"

namespace ridge {
namespace {

using json = nlohmann::ordered_json;

// Turn starts of a chat prompt where its state is kept: the last three (the history before the
// last user message, the answer before it and the message before that).
constexpr int kTurnSnapshots = 3;

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
  o.echo_logprobs = api.echo_logprobs;
  o.top_logprobs = api.top_logprobs;
  o.prompt_logprobs = api.prompt_logprobs;
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
  if (api.chat.tool_choice.mode == ToolChoice::Mode::kNamed && api.tool_arguments != nullptr) {
    o.forced_function = api.chat.tool_choice.function;  // constrained to its arguments
  }
  o.required_calls = api.chat.tool_choice.mode == ToolChoice::Mode::kRequired;
  if (!o.reasoning && !o.tool_calls) return std::nullopt;
  return ChatOutputParser(o);
}

// What a constrained output continuing the final message (continue_final_message) has written
// of its JSON already: that message's text, which the constraint moves past before the first
// token, if an instance of `schema` (null: any object) can begin so. A tool_choice constraint is
// a call from its start, so it takes a final message without text only.
absl::StatusOr<std::string> ConstrainedStart(const OpenAiRequest& api, const JsonSchema* schema,
                                             const std::optional<std::string>& continued) {
  if (!continued.has_value()) {
    return FieldError("continue_final_message",
                      "the chat template changes the final message's text, so where in the JSON "
                      "the output would go on is not known; send the request without "
                      "response_format, or without continue_final_message");
  }
  if (api.tool_arguments != nullptr && !continued->empty()) {
    return FieldError("continue_final_message",
                      "the final message has text, but tool_choice constrains the output to a "
                      "tool call from its start; send the final message without text, or "
                      "tool_choice \"auto\"");
  }
  const std::string_view text = *continued;
  if (const size_t fitting = JsonStartFitting(schema, text); fitting < text.size()) {
    return FieldError(
        "continue_final_message",
        absl::StrCat("the final message does not begin ",
                     schema != nullptr ? "an instance of the response_format's schema"
                                       : "a JSON object (response_format json_object)",
                     ", so no output could complete it: its first ", fitting,
                     " bytes could begin one, not the byte after them, '",
                     absl::CEscape(std::string(text.substr(fitting, 1))), "'"));
  }
  return *continued;
}

}  // namespace

OpenAiHandler::OpenAiHandler(GenerationBackend* backend, const Tokenizer* tokenizer,
                             const ChatTemplate* chat_template, PrometheusMetrics* metrics,
                             const HttpServerOptions* options,
                             std::shared_ptr<ActiveRequests> active)
    : backend_(backend),
      tokenizer_(tokenizer),
      chat_template_(chat_template),
      metrics_(metrics),
      options_(options),
      active_(std::move(active)),
      json_vocabulary_(tokenizer, options->limits.vocab_size) {
  if (chat_template_ != nullptr && tokenizer_ != nullptr) {
    turn_start_ = FindTurnStartToken(*chat_template_, *tokenizer_);
  }
  if (tokenizer_ != nullptr && !options_->reasoning_parser.empty()) {
    const std::optional<int32_t> open = tokenizer_->TokenToId(kReasoningOpen);
    const std::optional<int32_t> close = tokenizer_->TokenToId(kReasoningClose);
    const int32_t vocab = options_->limits.vocab_size;
    if (open && close && *open < vocab && *close < vocab) {
      reasoning_open_ = *open;
      reasoning_close_ = *close;
    }
  }
}

absl::StatusOr<std::vector<int32_t>> OpenAiHandler::PromptIds(
    const OpenAiRequest& api, const CompletionPrompt* prompt, const std::string& param,
    std::optional<std::string>* continued) const {
  std::vector<int32_t> ids;
  if (prompt != nullptr && prompt->ids) {
    ids = *prompt->ids;
  } else if (tokenizer_ == nullptr) {
    return FieldError(param,
                      "is text, but this server has no tokenizer (the model folder has no "
                      "tokenizer.json; start the server with --tokenizer DIR), so only token-id "
                      "prompts work");
  } else if (prompt == nullptr) {
    if (chat_template_ == nullptr) {
      return FieldError(param,
                        "cannot be used: the tokenizer has no chat template "
                        "(tokenizer_config.json \"chat_template\"); use /v1/completions");
    }
    auto text = chat_template_->Render(api.chat.render, continued);
    if (!text.ok()) return WithParam(text.status(), param);
    // The template already wrote the special tokens it wants (BOS included).
    auto encoded = tokenizer_->Encode(*text, /*add_special_tokens=*/false);
    if (!encoded.ok()) return WithParam(encoded.status(), param);
    ids = *std::move(encoded);
  } else {
    auto encoded = tokenizer_->Encode(*prompt->text, /*add_special_tokens=*/true);
    if (!encoded.ok()) return WithParam(encoded.status(), param);
    ids = *std::move(encoded);
  }
  if (ids.empty()) return FieldError(param, "holds no tokens; send a non-empty prompt");
  if (static_cast<int64_t>(ids.size()) > options_->max_prompt_tokens) {
    return WithParam(absl::OutOfRangeError(absl::StrCat(
                         param.back() == ']' ? param : "the prompt", " has ", ids.size(),
                         " tokens; this server accepts at most ", options_->max_prompt_tokens)),
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

absl::StatusOr<std::string> OpenAiHandler::EchoText(const CompletionPrompt& prompt,
                                                    const std::vector<int32_t>& ids) const {
  if (prompt.text) return *prompt.text;
  if (tokenizer_ == nullptr) {
    return FieldError("echo", "needs a tokenizer to turn the prompt's ids into text");
  }
  auto text = tokenizer_->Decode(ids, /*skip_special_tokens=*/false);
  if (!text.ok()) return WithParam(text.status(), "echo");
  return *std::move(text);
}

absl::StatusOr<OpenAiHandler::Prepared> OpenAiHandler::Prepare(ApiKind kind,
                                                               const std::string& body) const {
  const auto arrival = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(CheckJsonNesting(body, kMaxJsonInputNesting, "the request body"));
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
  std::optional<std::string> continued;  // the final message's text, continue_final_message
  EngineRequest engine;
  if (kind == ApiKind::kChat) {
    ASSIGN_OR_RETURN(engine.prompt, PromptIds(p.api, nullptr, "messages", &continued));
    // States at the starts of the last turns of a chat prompt, besides its end: a request that
    // edits the last message, or renders an answer otherwise, still reuses the history before.
    if (turn_start_.has_value()) {
      engine.snapshot_points = TurnBoundaries(engine.prompt, *turn_start_, kTurnSnapshots);
    }
  }
  engine.sampling = p.api.sampling;
  if (p.api.json_object || p.api.json_schema != nullptr || p.api.tool_arguments != nullptr) {
    const char* constraint = p.api.tool_arguments != nullptr ? "tool_choice" : "response_format";
    if (engine.sampling.ignore_eos && engine.sampling.stop_token_ids.empty()) {
      return FieldError("ignore_eos",
                        absl::StrCat("cannot be used with this ", constraint,
                                     ": its output must end once the JSON is complete, with an "
                                     "end-of-sequence token that ignore_eos takes away; send the "
                                     "request without ignore_eos, or with stop_token_ids to end "
                                     "it"));
    }
    auto vocabulary = json_vocabulary_.Get();
    if (!vocabulary.ok()) return WithParam(vocabulary.status(), constraint);
    engine.sampling.json_output = *std::move(vocabulary);
    engine.sampling.json_schema =
        p.api.tool_arguments != nullptr ? p.api.tool_arguments : p.api.json_schema;
    if (kind == ApiKind::kChat && p.api.chat.render.continue_final_message) {
      ASSIGN_OR_RETURN(engine.sampling.json_prefix,
                       ConstrainedStart(p.api, engine.sampling.json_schema.get(), continued));
    } else if (kind == ApiKind::kChat) {
      // The reply may think first (its reasoning_content), and the constraint takes the text
      // after </think>, as vLLM's structured outputs with a reasoning parser.
      engine.sampling.json_reasoning_open = reasoning_open_;
      engine.sampling.json_reasoning_close = reasoning_close_;
    }
  }
  engine.max_tokens_defaulted = p.api.max_tokens_defaulted;
  engine.cache_salt = p.api.cache_salt;
  engine.session_id = p.api.session_id;
  if (p.api.solver_tolerance || p.api.solver_max_iterations) {
    engine.solver = SolverOptions{
        p.api.solver_tolerance.value_or(options_->default_solver.tolerance),
        p.api.solver_max_iterations.value_or(options_->default_solver.max_iterations)};
  }
  engine.logprobs = p.api.logprobs;
  engine.top_logprobs = p.api.top_logprobs;
  if (p.api.timeout_seconds) {
    engine.deadline = arrival + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(*p.api.timeout_seconds));
  }
  // Either or both of echo with logprobs and vLLM's prompt_logprobs: the larger count of
  // alternatives serves both (each list keeps its own).
  if (p.api.echo_logprobs || p.api.prompt_logprobs) {
    engine.prompt_logprobs =
        std::max(p.api.echo_logprobs ? p.api.top_logprobs : 0, p.api.prompt_logprobs.value_or(0));
  }
  if (kind == ApiKind::kChat) {
    p.engine.push_back(std::move(engine));
    p.echo_text.emplace_back();
    return p;
  }
  for (size_t i = 0; i < p.api.prompts.size(); ++i) {
    const CompletionPrompt& prompt = p.api.prompts[i];
    const std::string param =
        p.api.prompts.size() == 1 ? "prompt" : absl::StrCat("prompt[", i, "]");
    EngineRequest one = engine;
    ASSIGN_OR_RETURN(one.prompt, PromptIds(p.api, &prompt, param, nullptr));
    std::string echo;
    if (p.api.echo) {
      ASSIGN_OR_RETURN(echo, EchoText(prompt, one.prompt));
    }
    p.engine.push_back(std::move(one));
    p.echo_text.push_back(std::move(echo));
  }
  return p;
}

namespace {

// What a generation's answer holds while it is produced: its choices, the queue their events
// arrive on, and its place among the active requests (drain waits for it). Its mutex orders the
// event thread that reads it against the transport's monitor that may abandon it.
struct Generation {
  Generation(std::shared_ptr<ChoiceSet> choices, std::shared_ptr<EventQueue> queue,
             std::shared_ptr<ActiveRequests> active)
      : choices(std::move(choices)), queue(std::move(queue)), guard(std::move(active)) {}

  // Cancels the unfinished choices; the caller holds `mutex`.
  void AbandonLocked(HttpAbandon why, const char* kind) {
    if (choices->finished()) return;
    const bool shutdown = why == HttpAbandon::kShutdown;
    Log(LogLevel::kDebug, kind, shutdown ? ": shutting down" : ": client gone",
        ", cancelling its requests");
    choices->Cancel(shutdown ? CancelReason::kShutdown : CancelReason::kClient);
  }

  std::mutex mutex;
  std::shared_ptr<ChoiceSet> choices;
  std::shared_ptr<EventQueue> queue;
  ActiveRequests::Guard guard;
};

// The answer of a non-streaming request: one body once every choice has finished.
class UnaryAnswer final : public PendingReply {
 public:
  explicit UnaryAnswer(std::unique_ptr<Generation> g) : g_(std::move(g)) {}

  std::optional<HttpReply> Poll() override {
    std::lock_guard<std::mutex> lock(g_->mutex);
    for (const RequestEvent& event : g_->queue->Take()) g_->choices->ConsumeUnary(event);
    if (!g_->choices->finished()) return std::nullopt;
    if (!g_->choices->status().ok()) return ErrorReply(g_->choices->status());
    return JsonReply(200, g_->choices->UnaryBody());
  }
  void Abandon(HttpAbandon why) override {
    std::lock_guard<std::mutex> lock(g_->mutex);
    g_->AbandonLocked(why, "request");
  }

 private:
  std::unique_ptr<Generation> g_;
};

// The answer of a streaming request: server-sent events as the tokens come, then [DONE].
class StreamedAnswer final : public StreamBody {
 public:
  explicit StreamedAnswer(std::unique_ptr<Generation> g) : g_(std::move(g)) {}

  bool Read(std::string* out) override {
    std::lock_guard<std::mutex> lock(g_->mutex);
    if (!g_->choices->done()) out->append(g_->choices->StreamBytes(g_->queue->Take()));
    return !g_->choices->done();
  }
  void Abandon(HttpAbandon why) override {
    std::lock_guard<std::mutex> lock(g_->mutex);
    g_->AbandonLocked(why, "stream");
  }

 private:
  std::unique_ptr<Generation> g_;
};

}  // namespace

HttpResult OpenAiHandler::Handle(ApiKind kind, const HttpRequest& request, const HttpWake& wake) {
  auto prepared = Prepare(kind, request.body);
  if (!prepared.ok()) {
    if (metrics_ != nullptr) metrics_->OnRejected(prepared.status());
    Log(LogLevel::kDebug, request.path, ": rejected: ", prepared.status().ToString());
    return ErrorReply(prepared.status());
  }
  // n choices of each prompt are n engine requests, seeds offset by the choice's index among
  // its prompt's, on one event queue that wakes the connection on each event.
  auto queue = std::make_shared<EventQueue>(wake);
  std::vector<ChoiceSource> sources;
  for (size_t k = 0; k < prepared->engine.size(); ++k) {
    for (int32_t i = 0; i < prepared->api.n; ++i) {
      EngineRequest engine = prepared->engine[k];
      if (engine.sampling.seed) *engine.sampling.seed += static_cast<uint64_t>(i);
      // The engine reports its own refusals (queue full, draining) to the metrics observer.
      auto id = backend_->Submit(std::move(engine), queue);
      if (!id.ok()) {
        for (const ChoiceSource& submitted : sources) backend_->Cancel(submitted.id);
        Log(LogLevel::kDebug, request.path, ": engine refused: ", id.status().ToString());
        return ErrorReply(WithParamFromMessage(id.status()));
      }
      sources.push_back({*id, prepared->echo_text[k], prepared->engine[k].prompt.front()});
    }
  }
  Log(LogLevel::kDebug, request.path, ": request ", sources.front().id, " (", sources.size(),
      " choices), ", prepared->engine.front().prompt.size(), " prompt tokens",
      prepared->api.stream ? ", streaming" : "");
  auto choices = std::make_shared<ChoiceSet>(
      backend_, tokenizer_, prepared->api, BuilderOptions(prepared->api, *options_, tokenizer_),
      OutputParserFor(prepared->api, *options_), std::move(sources));
  choices->include_usage = prepared->api.include_usage;
  choices->wants_tokens =
      prepared->api.logprobs || prepared->api.return_token_ids || tokenizer_ == nullptr;
  HttpResult result;
  if (!prepared->api.stream) {
    result.pending = std::make_shared<UnaryAnswer>(
        std::make_unique<Generation>(std::move(choices), std::move(queue), active_));
    return result;
  }
  result.reply.content_type = "text/event-stream";
  result.reply.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  result.stream = std::make_shared<StreamedAnswer>(
      std::make_unique<Generation>(std::move(choices), std::move(queue), active_));
  return result;
}

}  // namespace ridge
