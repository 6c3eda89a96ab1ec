// The HTTP/1.1 (and HTTPS) server underneath the routes: GNU libmicrohttpd, event-driven.
//
// A few event threads (epoll) serve every connection, so an idle, slow or streaming connection
// costs a socket and a few KiB, not a thread: thousands of streams fit, and connections that
// trickle their bytes cannot starve /health. Each request is read whole, then answered in one of
// three ways its route chooses:
//   - inline, on the event thread (cheap answers: probes, errors);
//   - on a worker thread (anything that parses, tokenizes or touches the disk), the connection
//     suspended meanwhile;
//   - later: a route's PendingReply or StreamBody is asked again whenever it wakes its
//     connection (HttpWake), so a generation waiting on the engine holds no thread at all.
// A monitor thread polls the sockets of answers still being produced: a client that hangs up
// abandons its answer within 100 ms, also while nothing has been written to it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "server/http_types.h"
#include "server/tls_options.h"

namespace ridge {

struct HttpTransportOptions {
  int event_threads = 2;    // threads polling the sockets
  int worker_threads = 16;  // threads running routes that may block
  // Open connections at once (streams included), and per client address (0: no limit). Past
  // them a new connection is closed at once. Capped by the process's descriptor limit.
  int max_connections = 16384;
  int max_connections_per_client = 0;
  // A connection with no traffic for this long is closed (not while its answer is being
  // produced: an answer that waits does not time out).
  int idle_timeout_seconds = 60;
  // A connection must deliver each request's line and headers within this long (from its start,
  // or from the end of its previous request); otherwise it is closed (however slowly it sends).
  int header_timeout_seconds = 60;
  size_t max_body_bytes = size_t{64} << 20;    // larger bodies: 413 (chunked ones: closed)
  size_t max_header_bytes = size_t{64} << 10;  // request line and headers; larger: 431
  TlsOptions tls = {};                         // enabled: HTTPS only
};

// How one request is answered, chosen from its method, path and headers before its body is read.
struct HttpRoute {
  using Handler = std::function<HttpResult(const HttpRequest&, const HttpWake&)>;
  Handler handler;                   // called once the body is read
  bool on_worker = true;             // false: inline, on the event thread (must not block)
  std::optional<HttpReply> refusal;  // set: sent at once, the body left unread (401, 404, 413)
};
using HttpRouter = std::function<HttpRoute(const HttpRequest& head)>;

class HttpTransport {
 public:
  HttpTransport(HttpRouter router, HttpTransportOptions options);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Listens on host:port (0: a free port) and returns the port; then Start serves on it.
  absl::StatusOr<int> Bind(const std::string& host, int port);
  absl::Status Start();
  // Closes every connection (answers still being produced are abandoned: kShutdown) and joins
  // the threads. Idempotent.
  void Stop();

  // From now on every answer closes its connection (a drain lets clients go elsewhere).
  void CloseConnectionsAfterEachAnswer() { close_connections_ = true; }
  // Abandons every answer still being produced (the drain period is over).
  void AbandonAll(HttpAbandon why);

  int64_t open_connections() const { return open_connections_.load(); }
  int max_connections() const { return options_.max_connections; }

  struct Impl;  // libmicrohttpd's callbacks reach the transport through it

 private:
  HttpRouter router_;
  HttpTransportOptions options_;
  std::atomic<bool> close_connections_{false};
  std::atomic<int64_t> open_connections_{0};
  std::unique_ptr<Impl> impl_;
};

}  // namespace ridge
