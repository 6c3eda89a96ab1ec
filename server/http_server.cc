#include "server/http_server.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "server/api_error.h"
#include "server/openai_handler.h"
#include "server/process_stats.h"
#include "server/session_routes.h"

namespace ridge {
namespace {

// The largest request body read (a 1M-token prompt as ids is about 8 MB of JSON).
constexpr size_t kMaxRequestBytes = size_t{64} << 20;

using json = nlohmann::ordered_json;

HttpTransportOptions TransportOptions(const HttpServerOptions& options) {
  HttpTransportOptions t = options.connections;
  t.max_body_bytes = kMaxRequestBytes;
  t.tls = options.tls;
  return t;
}

HttpRoute Refuse(HttpReply reply) {
  HttpRoute route;
  route.refusal = std::move(reply);
  return route;
}

// A handler that turns an escaping exception into a 500 with an OpenAI-style body.
HttpRoute::Handler Guarded(HttpRoute::Handler handler) {
  return [handler = std::move(handler)](const HttpRequest& request,
                                        const HttpWake& wake) -> HttpResult {
    try {
      return handler(request, wake);
    } catch (const std::exception& e) {
      Log(LogLevel::kError, request.method, " ", request.path, ": ", e.what());
      return ErrorReply(absl::InternalError(absl::StrCat("internal error: ", e.what())));
    }
  };
}

}  // namespace

HttpServer::HttpServer(GenerationBackend* backend, const Tokenizer* tokenizer,
                       const ChatTemplate* chat_template, PrometheusMetrics* metrics,
                       HttpServerOptions options)
    : backend_(backend),
      metrics_(metrics),
      options_(std::move(options)),
      openai_(std::make_unique<OpenAiHandler>(backend, tokenizer, chat_template, metrics, &options_,
                                              active_)),
      tokenize_{tokenizer, chat_template, options_.model_id, options_.max_prompt_tokens} {
  RegisterRoutes();
  transport_ = std::make_unique<HttpTransport>(
      [this](const HttpRequest& head) { return RouteFor(head); }, TransportOptions(options_));
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::RegisterRoutes() {
  const auto reply = [](auto make) {
    return
        [make](const HttpRequest& request, const HttpWake&) -> HttpResult { return make(request); };
  };
  // A backend that can no longer step (an aborted tensor-parallel group) fails both probes, so
  // that an orchestrator restarts the server even before it exits.
  routes_["/health"] = {"GET", false, reply([this](const HttpRequest&) {
                          const std::string failure = backend_->Snapshot().backend_failure;
                          if (!failure.empty()) return ErrorReply(absl::UnavailableError(failure));
                          return JsonReply(200, {{"status", "ok"}});
                        })};
  routes_["/ready"] = {"GET", false, reply([this](const HttpRequest&) {
                         const std::string failure = backend_->Snapshot().backend_failure;
                         if (!failure.empty()) return ErrorReply(absl::UnavailableError(failure));
                         if (accepting()) return JsonReply(200, {{"status", "ready"}});
                         return ErrorReply(absl::UnavailableError(
                             draining_ ? "the server is draining" : "the model is not loaded yet"));
                       })};
  // Inline too: the engine's snapshot is a copy under a lock held for no longer than that.
  routes_["/metrics"] = {"GET", false, reply([this](const HttpRequest&) {
                           if (metrics_ == nullptr) {
                             return ErrorReply(absl::NotFoundError("metrics are disabled"));
                           }
                           metrics_->SetSnapshot(backend_->Snapshot());
                           metrics_->SetHttpConnections(transport_->open_connections(),
                                                        transport_->max_connections());
                           metrics_->SetProcess(ReadProcessStats());
                           HttpReply out;
                           out.content_type = "text/plain; version=0.0.4; charset=utf-8";
                           out.body = metrics_->Serialize();
                           return out;
                         })};
  routes_["/v1/models"] = {
      "GET", false, reply([this](const HttpRequest&) {
        const json model = {{"id", options_.model_id},
                            {"object", "model"},
                            {"created", options_.created},
                            {"owned_by", "ridgeserve"}};
        return JsonReply(200, {{"object", "list"}, {"data", json::array({model})}});
      })};
  const auto generate = [this](ApiKind kind) {
    return [this, kind](const HttpRequest& request, const HttpWake& wake) {
      return openai_->Handle(kind, request, wake);
    };
  };
  routes_["/v1/completions"] = {"POST", true, generate(ApiKind::kCompletion)};
  routes_["/v1/chat/completions"] = {"POST", true, generate(ApiKind::kChat)};
  const auto tokenize = [this, reply](bool forward) {
    return reply([this, forward](const HttpRequest& request) {
      auto out = forward ? TokenizeRequest(tokenize_, request.body)
                         : DetokenizeRequest(tokenize_, request.body);
      return out.ok() ? JsonReply(200, *out) : ErrorReply(out.status());
    });
  };
  routes_["/tokenize"] = {"POST", true, tokenize(true)};
  routes_["/detokenize"] = {"POST", true, tokenize(false)};
}

HttpRoute HttpServer::RouteFor(const HttpRequest& head) const {
  // API keys before any route: a request without an accepted key gets 401 and reaches nothing.
  const ApiKeys& keys = options_.api_keys;
  const bool open = head.path == "/health" || head.path == "/ready" ||
                    (head.path == "/metrics" && options_.open_metrics);
  if (keys.enabled() && !open && !keys.Accepts(head.Header("authorization"))) {
    json body = ErrorBody(absl::UnauthenticatedError(
        "a valid API key is required: send it as 'Authorization: Bearer <key>'"));
    body["error"]["type"] = "authentication_error";
    body["error"]["code"] = "invalid_api_key";
    HttpReply refusal = JsonReply(401, body);
    refusal.headers.emplace_back("WWW-Authenticate", "Bearer");
    return Refuse(std::move(refusal));
  }
  std::string allowed;
  HttpRoute route;
  if (auto it = routes_.find(head.path); it != routes_.end()) {
    if (head.method == it->second.method || (head.method == "HEAD" && it->second.method == "GET")) {
      route.handler = Guarded(it->second.handler);
      route.on_worker = it->second.on_worker;
    } else {
      allowed = it->second.method;
    }
  } else {
    route.handler = SessionRoute(backend_, head.method, head.path, &allowed);
    if (route.handler) route.handler = Guarded(std::move(route.handler));
  }
  if (!route.handler) {
    // A path that exists under another method: 405 with Allow; any other: 404.
    if (allowed.empty()) {
      return Refuse(
          ErrorReply(absl::NotFoundError(absl::StrCat("no route ", head.method, " ", head.path))));
    }
    json body = ErrorBody(absl::InvalidArgumentError(
        absl::StrCat(head.method, " ", head.path, " is not allowed; use ", allowed)));
    body["error"]["code"] = "method_not_allowed";
    HttpReply refusal = JsonReply(405, body);
    refusal.headers.emplace_back("Allow", allowed);
    return Refuse(std::move(refusal));
  }
  const bool generation = head.path == "/v1/completions" || head.path == "/v1/chat/completions";
  if (generation && !accepting()) {
    const absl::Status status = absl::UnavailableError(
        draining_ ? "the server is draining (shutting down) and admits no new requests"
                  : "the model is not loaded yet; retry when /ready answers 200");
    if (metrics_ != nullptr) metrics_->OnRejected(status);
    return Refuse(ErrorReply(status));
  }
  return route;
}

absl::StatusOr<int> HttpServer::Bind(const std::string& host, int port) {
  auto bound = transport_->Bind(host, port);
  if (!bound.ok()) return bound.status();
  if (absl::Status started = transport_->Start(); !started.ok()) {
    if (options_.tls.enabled()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "HTTPS: cannot use --ssl-certfile ", options_.tls.cert_file, " / --ssl-keyfile ",
          options_.tls.key_file, options_.tls.verify_clients() ? " / --ssl-ca-certs " : "",
          options_.tls.ca_file, ": ", started.message()));
    }
    return started;
  }
  return bound;
}

void HttpServer::Run() {
  std::unique_lock<std::mutex> lock(run_mutex_);
  stopped_.wait(lock, [&] { return stop_requested_; });
}

void HttpServer::StartDrain() {
  draining_ = true;
  transport_->CloseConnectionsAfterEachAnswer();
}

void HttpServer::CancelAll() { transport_->AbandonAll(HttpAbandon::kShutdown); }

void HttpServer::Stop() {
  if (transport_ != nullptr) transport_->Stop();
  {
    std::lock_guard<std::mutex> lock(run_mutex_);
    stop_requested_ = true;
  }
  stopped_.notify_all();
}

}  // namespace ridge
