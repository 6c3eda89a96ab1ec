#include "server/http_server.h"

#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "server/api_error.h"
#include "server/openai_handler.h"
#include "server/session_routes.h"

namespace ridge {
namespace {

// cpp-httplib's plain server, or with TLS its SSLServer (which requires and verifies client
// certificates when given a CA). A TLS server that could not load its files is not valid: Bind
// says so.
std::unique_ptr<httplib::Server> MakeServer(const TlsOptions& tls) {
  if (!tls.enabled()) return std::make_unique<httplib::Server>();
  return std::make_unique<httplib::SSLServer>(tls.cert_file.c_str(), tls.key_file.c_str(),
                                              tls.verify_clients() ? tls.ca_file.c_str() : nullptr);
}

// The largest request body read (a 1M-token prompt as ids is about 8 MB of JSON).
constexpr size_t kMaxRequestBytes = size_t{64} << 20;

using json = nlohmann::ordered_json;

void SendJson(httplib::Response& response, int status, const json& body) {
  response.status = status;
  response.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace),
                       "application/json");
}

void SendError(httplib::Response& response, const absl::Status& status) {
  if (HttpStatusFor(status) == 503) response.set_header("Retry-After", "1");
  SendJson(response, HttpStatusFor(status), ErrorBody(status));
}

}  // namespace

HttpServer::HttpServer(GenerationBackend* backend, const Tokenizer* tokenizer,
                       const ChatTemplate* chat_template, PrometheusMetrics* metrics,
                       HttpServerOptions options)
    : backend_(backend),
      metrics_(metrics),
      options_(std::move(options)),
      openai_(std::make_unique<OpenAiHandler>(backend, tokenizer, chat_template, metrics, &options_,
                                              &active_, &cancel_all_)),
      tokenize_{tokenizer, chat_template, options_.model_id, options_.max_prompt_tokens},
      server_(MakeServer(options_.tls)) {
  // cpp-httplib sends without MSG_NOSIGNAL: a client that hangs up mid-stream would raise
  // SIGPIPE and kill the process. Ignored, the write fails and the request is cancelled.
  signal(SIGPIPE, SIG_IGN);
  const int threads = std::max(4, options_.worker_threads);
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // cpp-httplib's defaults: SO_REUSEPORT (a second server could share the port silently) and a
  // listen backlog of 5 (a burst of concurrent connects overflows it: clients see resets). Take
  // SO_REUSEADDR only, and remember the socket to raise the backlog after binding.
  // TCP_NODELAY (accepted sockets inherit it on Linux): with Nagle's algorithm on, each small
  // server-sent event waited for the client's acknowledgement of the previous one, which a
  // client may delay by up to 40 ms, and the stream's last event held up the client's next
  // request.
  server_->set_socket_options([this](int fd) {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    listen_fd_ = fd;
  });
  server_->set_payload_max_length(kMaxRequestBytes);
  // An idle keep-alive connection holds a worker until this timeout, and cpp-httplib's stop()
  // waits for every worker: short, so that shutdown after a drain is not held up.
  server_->set_keep_alive_timeout(2);
  // While draining, every response closes its connection, so clients let go of workers.
  server_->set_post_routing_handler([this](const httplib::Request&, httplib::Response& response) {
    if (draining_) response.set_header("Connection", "close");
  });
  server_->set_exception_handler(
      [](const httplib::Request& request, httplib::Response& response, std::exception_ptr e) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          what = ex.what();
        } catch (...) {
        }
        Log(LogLevel::kError, request.method, " ", request.path, ": ", what);
        SendError(response, absl::InternalError(absl::StrCat("internal error: ", what)));
      });
  RegisterRoutes();
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::RegisterRoutes() {
  // API keys before any route: a request without an accepted key gets 401 and reaches nothing.
  server_->set_pre_routing_handler(
      [this](const httplib::Request& request, httplib::Response& response) {
        using Result = httplib::Server::HandlerResponse;
        const ApiKeys& keys = options_.api_keys;
        if (!keys.enabled() || request.path == "/health" || request.path == "/ready") {
          return Result::Unhandled;
        }
        if (request.path == "/metrics" && options_.open_metrics) return Result::Unhandled;
        if (keys.Accepts(request.get_header_value("Authorization"))) return Result::Unhandled;
        response.set_header("WWW-Authenticate", "Bearer");
        nlohmann::ordered_json body = ErrorBody(absl::UnauthenticatedError(
            "a valid API key is required: send it as 'Authorization: Bearer <key>'"));
        body["error"]["type"] = "authentication_error";
        body["error"]["code"] = "invalid_api_key";
        SendJson(response, 401, body);
        return Result::Handled;
      });
  server_->Get("/health", [](const httplib::Request&, httplib::Response& response) {
    SendJson(response, 200, {{"status", "ok"}});
  });
  server_->Get("/ready", [this](const httplib::Request&, httplib::Response& response) {
    if (accepting()) return SendJson(response, 200, {{"status", "ready"}});
    SendError(response, absl::UnavailableError(draining_ ? "the server is draining"
                                                         : "the model is not loaded yet"));
  });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    if (metrics_ == nullptr) {
      return SendError(response, absl::NotFoundError("metrics are disabled"));
    }
    metrics_->SetSnapshot(backend_->Snapshot());
    response.set_content(metrics_->Serialize(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& response) {
    const json model = {{"id", options_.model_id},
                        {"object", "model"},
                        {"created", options_.created},
                        {"owned_by", "ridgeserve"}};
    SendJson(response, 200, {{"object", "list"}, {"data", json::array({model})}});
  });
  const auto generate = [this](ApiKind kind) {
    return [this, kind](const httplib::Request& request, httplib::Response& response) {
      if (!accepting()) {
        const absl::Status status = absl::UnavailableError(
            draining_ ? "the server is draining (shutting down) and admits no new requests"
                      : "the model is not loaded yet; retry when /ready answers 200");
        if (metrics_ != nullptr) metrics_->OnRejected(status);
        return SendError(response, status);
      }
      openai_->Handle(kind, request, response);
    };
  };
  server_->Post("/v1/completions", generate(ApiKind::kCompletion));
  server_->Post("/v1/chat/completions", generate(ApiKind::kChat));
  const auto tokenize = [this](bool forward) {
    return [this, forward](const httplib::Request& request, httplib::Response& response) {
      auto out = forward ? TokenizeRequest(tokenize_, request.body)
                         : DetokenizeRequest(tokenize_, request.body);
      if (!out.ok()) return SendError(response, out.status());
      SendJson(response, 200, *out);
    };
  };
  server_->Post("/tokenize", tokenize(true));
  server_->Post("/detokenize", tokenize(false));
  RegisterSessionRoutes(*server_, backend_);
  // Routes that exist under another method answer 405 with Allow; others 404; a body over
  // the payload limit 413; each with an OpenAI-style error body.
  server_->set_error_handler([](const httplib::Request& request, httplib::Response& response) {
    if (!response.body.empty()) return;
    static const std::map<std::string, std::string> kAllowed = {
        {"/health", "GET"},    {"/ready", "GET"},           {"/metrics", "GET"},
        {"/v1/models", "GET"}, {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
        {"/tokenize", "POST"}, {"/detokenize", "POST"},     {"/v1/sessions", "GET"}};
    if (response.status == 404) {
      if (auto it = kAllowed.find(request.path); it != kAllowed.end()) {
        response.set_header("Allow", it->second);
        nlohmann::ordered_json body = ErrorBody(absl::InvalidArgumentError(
            absl::StrCat(request.method, " ", request.path, " is not allowed; use ", it->second)));
        body["error"]["code"] = "method_not_allowed";
        SendJson(response, 405, body);
        return;
      }
      SendError(response,
                absl::NotFoundError(absl::StrCat("no route ", request.method, " ", request.path)));
    } else if (response.status == 413) {
      SendJson(response, 413,
               ErrorBody(absl::InvalidArgumentError(absl::StrCat(
                   "the request body is larger than the limit of ", kMaxRequestBytes, " bytes"))));
    }
  });
}

absl::StatusOr<int> HttpServer::Bind(const std::string& host, int port) {
  if (!server_->is_valid()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HTTPS: cannot use --ssl-certfile ", options_.tls.cert_file, " / --ssl-keyfile ",
        options_.tls.key_file, options_.tls.verify_clients() ? " / --ssl-ca-certs " : "",
        options_.tls.ca_file));
  }
  int bound = port;
  if (port == 0) {
    bound = server_->bind_to_any_port(host);
    if (bound <= 0) return absl::UnavailableError(absl::StrCat("cannot bind ", host, ":any"));
  } else if (!server_->bind_to_port(host, port)) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port,
                                               " (in use, or not an address of this host?)"));
  }
  // Listening again on a listening socket only changes its backlog (Linux).
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
  return bound;
}

void HttpServer::Run() { server_->listen_after_bind(); }

void HttpServer::Stop() {
  if (server_ != nullptr) server_->stop();
}

}  // namespace ridge
