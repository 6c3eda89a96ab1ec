// The HTTP front door (cpp-httplib): OpenAI-compatible /v1/completions, /v1/chat/completions
// and /v1/models, plus /health (liveness), /ready (loaded and admitting) and /metrics.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/solver_types.h"
#include "server/active_requests.h"
#include "server/api_keys.h"
#include "server/generation_backend.h"
#include "server/openai_request.h"
#include "server/prometheus_metrics.h"
#include "server/tls_options.h"
#include "server/tokenize_handler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
}

namespace ridge {

class OpenAiHandler;

struct HttpServerOptions {
  std::string model_id;          // the only accepted "model" (e.g. the checkpoint folder name)
  RequestLimits limits;          // vocabulary, token and solver limits for request validation
  SolverOptions default_solver;  // fills in solver_tolerance / solver_max_iterations
  int64_t max_prompt_tokens = 1 << 20;  // longer prompts: 413
  int worker_threads = 64;  // concurrent connections served (a stream holds one for its life)
  int64_t created = 0;      // unix time reported by /v1/models
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
  void StartDrain() { draining_ = true; }
  bool accepting() const { return ready_ && !draining_; }
  // Cancels every request still being answered (the drain period is over).
  void CancelAll() { cancel_all_ = true; }
  // Waits until no response is still being written; true when that happened before `deadline`.
  bool WaitForActiveRequests(std::chrono::steady_clock::time_point deadline) {
    return active_.WaitIdle(deadline);
  }

 private:
  void RegisterRoutes();

  GenerationBackend* backend_;
  PrometheusMetrics* metrics_;
  HttpServerOptions options_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::atomic<bool> cancel_all_{false};
  int listen_fd_ = -1;  // the listening socket, to raise cpp-httplib's backlog of 5
  ActiveRequests active_;
  std::unique_ptr<OpenAiHandler> openai_;
  TokenizeContext tokenize_;  // /tokenize and /detokenize
  std::unique_ptr<httplib::Server> server_;
};

}  // namespace ridge
