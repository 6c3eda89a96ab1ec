// The HTTP front door: OpenAI-compatible /v1/completions, /v1/chat/completions and /v1/models,
// /tokenize and /detokenize, the session routes, plus /health (liveness: 503 once the backend
// can no longer step), /ready (loaded and admitting) and /metrics; API keys; served by the
// event-driven HttpTransport. The probes, /metrics and /v1/models are answered on the event
// threads, so no amount of generation traffic (or of slow connections, or of requests waiting
// for a worker) keeps them from answering.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/solver_types.h"
#include "server/active_requests.h"
#include "server/api_keys.h"
#include "server/generation_backend.h"
#include "server/http_transport.h"
#include "server/openai_request.h"
#include "server/prometheus_metrics.h"
#include "server/tls_options.h"
#include "server/tokenize_handler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ridge {

class OpenAiHandler;

struct HttpServerOptions {
  std::string model_id;          // the only accepted "model" (e.g. the checkpoint folder name)
  RequestLimits limits;          // vocabulary, token and solver limits for request validation
  SolverOptions default_solver;  // fills in solver_tolerance / solver_max_iterations
  int64_t max_prompt_tokens = 1 << 20;  // longer prompts: 413
  // Threads, connection limits and time-outs (server/http_transport.h); its body limit and TLS
  // are set from this server's own (`tls` below, shared with gRPC).
  HttpTransportOptions connections = {};
  int64_t created = 0;  // unix time reported by /v1/models
  // Keys the generation routes (/v1/...) and, unless open_metrics, /metrics require
  // (Authorization: Bearer); /health and /ready are always open (probes). No keys: all open.
  ApiKeys api_keys = {};
  bool open_metrics = false;
  TlsOptions tls = {};  // enabled: HTTPS only (and client certificates with a CA)
  // "qwen3": chat replies split <think>...</think> into reasoning_content; empty: off.
  std::string reasoning_parser;
};

class HttpServer {
 public:
  // `backend` must outlive the server; `tokenizer`, `chat_template` (text prompts, chat) and
  // `metrics` may be null and, when not, must outlive it too.
  HttpServer(GenerationBackend* backend, const Tokenizer* tokenizer,
             const ChatTemplate* chat_template, PrometheusMetrics* metrics,
             HttpServerOptions options);
  ~HttpServer();

  // Binds host:port (port 0: any free port) and returns the bound port.
  absl::StatusOr<int> Bind(const std::string& host, int port);
  // Serves until Stop(); call after Bind, typically on its own thread.
  void Run();
  void Stop();

  // /ready answers 200 only when ready and not draining; draining also refuses new generation
  // requests with 503.
  void SetReady(bool ready) { ready_ = ready; }
  void StartDrain();
  bool accepting() const { return ready_ && !draining_; }
  // Cancels every request still being answered (the drain period is over).
  void CancelAll();
  // Waits until no response is still being written; true when that happened before `deadline`.
  bool WaitForActiveRequests(std::chrono::steady_clock::time_point deadline) {
    return active_->WaitIdle(deadline);
  }

 private:
  struct Route {
    std::string method;
    bool on_worker = true;
    HttpRoute::Handler handler;
  };
  void RegisterRoutes();
  HttpRoute RouteFor(const HttpRequest& head) const;

  GenerationBackend* backend_;
  PrometheusMetrics* metrics_;
  HttpServerOptions options_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  // Shared with the answers being produced: one may be destroyed after the server (its last owner
  // can be an engine thread delivering the final event of a request the server stopped on).
  std::shared_ptr<ActiveRequests> active_ = std::make_shared<ActiveRequests>();
  std::unique_ptr<OpenAiHandler> openai_;
  TokenizeContext tokenize_;             // /tokenize and /detokenize
  std::map<std::string, Route> routes_;  // by path (the session routes aside)
  std::unique_ptr<HttpTransport> transport_;
  std::mutex run_mutex_;
  std::condition_variable stopped_;
  bool stop_requested_ = false;
};

}  // namespace ridge
