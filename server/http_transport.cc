#include "server/http_transport.h"

#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "server/head_deadlines.h"
#include "server/http_exchange.h"
#include "server/listening_socket.h"
#include "server/worker_pool.h"

namespace ridge {
namespace {

using http_internal::AbandonAnswer;
using http_internal::AbandonResult;
using http_internal::AnswerInProgress;
using http_internal::Exchange;
using http_internal::Stage;
using http_internal::SuspendUnlessWoken;
using http_internal::Wake;
using http_internal::WakeOf;

using Clock = std::chrono::steady_clock;
constexpr auto kMonitorPeriod = std::chrono::milliseconds(100);
constexpr size_t kStreamBlockBytes = 16 << 10;

MHD_Result AddHeaderIterator(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto* headers = static_cast<std::map<std::string, std::string>*>(cls);
  if (key != nullptr) (*headers)[absl::AsciiStrToLower(key)] = value == nullptr ? "" : value;
  return MHD_YES;
}

}  // namespace

struct HttpTransport::Impl {
  explicit Impl(HttpTransport* owner)
      : owner(owner),
        workers(std::max(1, owner->options_.worker_threads)),
        heads(std::chrono::seconds(owner->options_.header_timeout_seconds)) {}

  HttpTransport* owner;
  MHD_Daemon* daemon = nullptr;
  int listen_fd = -1;
  WorkerPool workers;
  std::atomic<bool> stopping{false};
  std::atomic<bool> abandoned_all{false};

  std::mutex registry_mutex;
  std::unordered_map<Exchange*, std::shared_ptr<Exchange>> registry;

  HeadDeadlines heads;

  std::mutex monitor_mutex;
  std::condition_variable monitor_wake;
  bool monitor_stop = false;
  std::thread monitor;

  const HttpTransportOptions& options() const { return owner->options_; }

  // ----- libmicrohttpd's callbacks -----

  static MHD_Result OnAccess(void* cls, MHD_Connection* connection, const char* url,
                             const char* method, const char* /*version*/, const char* upload,
                             size_t* upload_size, void** slot) {
    auto* self = static_cast<Impl*>(cls);
    if (*slot == nullptr) return self->OnHeaders(connection, url, method, slot);
    Exchange& x = *static_cast<Exchange*>(*slot);
    if (*upload_size != 0) {
      const size_t limit = self->options().max_body_bytes;
      if (!x.refusal && x.request.body.size() + *upload_size > limit) {
        // A chunked body past the limit: the rest is read and thrown away, then 413.
        x.refusal = TooLarge(limit);
        x.discarded = x.request.body.size();
        x.request.body.clear();
      }
      if (x.refusal) {
        x.discarded += *upload_size;
        // Reading a refused body lets the client see the answer instead of a reset; past twice
        // the limit the connection is closed instead.
        if (x.discarded > 2 * limit) return MHD_NO;
      } else {
        x.request.body.append(upload, *upload_size);
      }
      *upload_size = 0;
      return MHD_YES;
    }
    if (x.refusal) {
      x.stage = Stage::kDone;
      return self->QueueReply(x, *x.refusal);
    }
    return self->Guard(x, [&] { return self->Advance(x); });
  }

  static void OnCompleted(void* cls, MHD_Connection* connection, void** slot,
                          MHD_RequestTerminationCode toe) {
    auto* self = static_cast<Impl*>(cls);
    self->heads.Waiting(connection, true);  // a keep-alive connection's next request
    if (*slot == nullptr) return;
    std::shared_ptr<Exchange> x;
    {
      std::lock_guard<std::mutex> lock(self->registry_mutex);
      auto it = self->registry.find(static_cast<Exchange*>(*slot));
      if (it != self->registry.end()) {
        x = std::move(it->second);
        self->registry.erase(it);
      }
    }
    *slot = nullptr;
    if (x == nullptr) return;
    std::optional<HttpResult> unanswered;  // a worker's answer the event thread never took
    {
      std::lock_guard<std::mutex> lock(x->mutex);
      x->closed = true;
      std::swap(unanswered, x->result);
    }
    if (unanswered) AbandonResult(*unanswered, HttpAbandon::kShutdown);
    const Stage stage = x->stage.load();
    const bool unfinished =
        stage == Stage::kPending || stage == Stage::kWorking ||
        (stage == Stage::kStreaming && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK);
    if (unfinished) {
      AbandonAnswer(*x, self->stopping ? HttpAbandon::kShutdown : HttpAbandon::kClientGone);
    }
  }

  static void OnConnection(void* cls, MHD_Connection* connection, void**,
                           MHD_ConnectionNotificationCode code) {
    auto* self = static_cast<Impl*>(cls);
    const bool started = code == MHD_CONNECTION_NOTIFY_STARTED;
    self->owner->open_connections_ += started ? 1 : -1;
    // libmicrohttpd closes the socket after this call (HeadDeadlines relies on it).
    if (!started) {
      self->heads.Closed(connection);
      return;
    }
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info != nullptr) self->heads.Opened(connection, info->connect_fd);
  }

  static ssize_t OnStreamRead(void* cls, uint64_t /*pos*/, char* buffer, size_t max) {
    Exchange* x = static_cast<std::shared_ptr<Exchange>*>(cls)->get();
    if (x == nullptr) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (x->stage != Stage::kStreaming) return MHD_CONTENT_READER_END_OF_STREAM;
    try {
      return ReadStream(*x, buffer, max);
    } catch (const std::exception& e) {
      Log(LogLevel::kError, "HTTP: streaming ", x->request.path, ": ", e.what());
      x->client_gone = true;
      AbandonAnswer(*x, HttpAbandon::kShutdown);
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
  }
  static void OnStreamFree(void* cls) { delete static_cast<std::shared_ptr<Exchange>*>(cls); }

  static void OnLog(void*, const char* format, va_list args) {
    char text[512];
    std::vsnprintf(text, sizeof(text), format, args);
    std::string line(text);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    Log(LogLevel::kDebug, "HTTP (libmicrohttpd): ", line);
  }

  // ----- one request -----

  // Headers are in: register the exchange, route it, refuse it at once if the route says so.
  MHD_Result OnHeaders(MHD_Connection* connection, const char* url, const char* method,
                       void** slot) {
    heads.Waiting(connection, false);
    if (owner->options_.tls.verify_clients() && !ClientCertificateVerified(connection)) {
      Log(LogLevel::kDebug, "HTTPS: a client without a certificate the CA signed: closing");
      return MHD_NO;
    }
    auto x = std::make_shared<Exchange>();
    x->connection = connection;
    x->stopping = &stopping;
    if (const MHD_ConnectionInfo* info =
            MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD)) {
      x->fd = info->connect_fd;
    }
    x->request.method = method;
    x->request.path = url;
    MHD_get_connection_values(connection, MHD_HEADER_KIND, AddHeaderIterator, &x->request.headers);
    try {
      x->route = owner->router_(x->request);
    } catch (const std::exception& e) {
      Log(LogLevel::kError, "HTTP: routing ", x->request.path, ": ", e.what());
      return MHD_NO;
    }
    {
      std::lock_guard<std::mutex> lock(registry_mutex);
      registry.emplace(x.get(), x);
    }
    *slot = x.get();
    uint64_t length = 0;
    const std::string declared = x->request.Header("content-length");
    if (!declared.empty() && absl::SimpleAtoi(declared, &length) &&
        length > options().max_body_bytes) {
      // Declared too large: answered at once (the body is not read; the connection closes).
      x->stage = Stage::kDone;
      return QueueReply(*x, TooLarge(options().max_body_bytes));
    }
    // Other refusals wait for the (discarded) body: answered now, libmicrohttpd would close the
    // connection, losing keep-alive and, with a body still arriving, resetting it.
    x->refusal = std::move(x->route.refusal);
    return MHD_YES;
  }

  static HttpReply TooLarge(size_t limit) {
    HttpReply reply;
    reply.status = 413;
    reply.body = absl::StrCat(
        R"({"error":{"message":"the request body is larger than the limit of )", limit,
        R"( bytes","type":"invalid_request_error","param":null,"code":"request_too_large"}})");
    return reply;
  }

  // Runs a step of an exchange on an event thread; an exception (a route's bug, memory) must
  // not unwind through libmicrohttpd's C frames: the connection is closed instead.
  template <typename Step>
  MHD_Result Guard(Exchange& x, Step step) {
    try {
      return step();
    } catch (const std::exception& e) {
      Log(LogLevel::kError, "HTTP: ", x.request.method, " ", x.request.path, ": ", e.what());
      x.client_gone = true;
      AbandonAnswer(x, HttpAbandon::kShutdown);
      return MHD_NO;
    }
  }

  bool ClientCertificateVerified(MHD_Connection* connection) {
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (info == nullptr || info->tls_session == nullptr) return false;
    unsigned int status = 0;
    const int code =
        gnutls_certificate_verify_peers2(static_cast<gnutls_session_t>(info->tls_session), &status);
    return code == GNUTLS_E_SUCCESS && status == 0;
  }

  // The body is in (or the connection was woken): move the exchange on.
  MHD_Result Advance(Exchange& x) {
    switch (x.stage.load()) {
      case Stage::kReceiving:
        if (!x.route.on_worker) return Answer(x, x.route.handler(x.request, WakeOf(Self(x))));
        {
          std::lock_guard<std::mutex> lock(x.mutex);
          if (stopping) return MHD_NO;
          x.stage = Stage::kWorking;
          x.suspended = true;
          MHD_suspend_connection(x.connection);
        }
        workers.Post([this, x = Self(x)] { RunRoute(x); });
        return MHD_YES;
      case Stage::kWorking:
        while (true) {
          std::optional<HttpResult> result;
          {
            std::lock_guard<std::mutex> lock(x.mutex);
            std::swap(result, x.result);
          }
          if (result) return Answer(x, *std::move(result));
          if (stopping) return MHD_NO;
          if (SuspendUnlessWoken(x)) return MHD_YES;
        }
      case Stage::kPending:
        return PollPending(x);
      default:
        return MHD_NO;
    }
  }

  std::shared_ptr<Exchange> Self(Exchange& x) { return x.shared_from_this(); }

  // On a worker: the route's handler, then back to the event thread.
  void RunRoute(const std::shared_ptr<Exchange>& x) {
    {
      std::lock_guard<std::mutex> lock(x->mutex);
      if (x->closed) return;  // stopped (or gone) before its turn: nothing to run
    }
    HttpResult result;
    try {
      result = x->route.handler(x->request, WakeOf(x));
    } catch (const std::exception& e) {
      Log(LogLevel::kError, "HTTP: ", x->request.method, " ", x->request.path, ": ", e.what());
      result = HttpResult();
      result.reply.status = 500;
      result.reply.body =
          R"({"error":{"message":"internal error","type":"server_error","param":null,"code":null}})";
    }
    bool dropped = false;
    {
      std::lock_guard<std::mutex> lock(x->mutex);
      dropped = x->closed;
      if (!dropped) x->result = std::move(result);
    }
    if (dropped) {
      AbandonResult(result, HttpAbandon::kShutdown);
      return;
    }
    Wake(*x);
  }

  MHD_Result Answer(Exchange& x, HttpResult result) {
    if (abandoned_all) AbandonResult(result, HttpAbandon::kShutdown);
    if (result.stream != nullptr) {
      x.stream = std::move(result.stream);
      x.stage = Stage::kStreaming;
      MHD_Response* response =
          MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, kStreamBlockBytes, OnStreamRead,
                                            new std::shared_ptr<Exchange>(Self(x)), OnStreamFree);
      AddHeaders(response, result.reply);
      const MHD_Result queued = MHD_queue_response(x.connection, result.reply.status, response);
      MHD_destroy_response(response);
      return queued;
    }
    if (result.pending != nullptr) {
      x.pending = std::move(result.pending);
      x.stage = Stage::kPending;
      return PollPending(x);
    }
    x.stage = Stage::kDone;
    return QueueReply(x, result.reply);
  }

  MHD_Result PollPending(Exchange& x) {
    while (true) {
      if (x.client_gone || stopping) return MHD_NO;
      if (std::optional<HttpReply> reply = x.pending->Poll()) {
        x.stage = Stage::kDone;
        return QueueReply(x, *reply);
      }
      if (SuspendUnlessWoken(x)) return MHD_YES;
    }
  }

  static ssize_t ReadStream(Exchange& x, char* buffer, size_t max) {
    while (true) {
      if (x.out_pos < x.out.size()) {
        const size_t n = std::min(max, x.out.size() - x.out_pos);
        std::memcpy(buffer, x.out.data() + x.out_pos, n);
        x.out_pos += n;
        if (x.out_pos == x.out.size()) {
          x.out.clear();
          x.out_pos = 0;
        }
        return static_cast<ssize_t>(n);
      }
      if (x.stream_ended) {
        x.stage = Stage::kDone;
        return MHD_CONTENT_READER_END_OF_STREAM;
      }
      if (x.client_gone || *x.stopping) return MHD_CONTENT_READER_END_WITH_ERROR;
      if (!x.stream->Read(&x.out)) x.stream_ended = true;
      // Nothing yet: suspended until a wake (or, woken meanwhile or stopping, look again).
      if (x.out.empty() && !x.stream_ended && SuspendUnlessWoken(x)) return 0;
    }
  }

  void AddHeaders(MHD_Response* response, const HttpReply& reply) const {
    if (!reply.content_type.empty()) {
      MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, reply.content_type.c_str());
    }
    for (const auto& [name, value] : reply.headers) {
      MHD_add_response_header(response, name.c_str(), value.c_str());
    }
    if (owner->close_connections_) {
      MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
    }
  }

  MHD_Result QueueReply(Exchange& x, const HttpReply& reply) {
    MHD_Response* response = MHD_create_response_from_buffer(
        reply.body.size(), const_cast<char*>(reply.body.data()), MHD_RESPMEM_MUST_COPY);
    AddHeaders(response, reply);
    const MHD_Result queued = MHD_queue_response(x.connection, reply.status, response);
    MHD_destroy_response(response);
    return queued;
  }

  // ----- the monitor: clients that hung up, while their answers are being produced -----

  std::vector<std::shared_ptr<Exchange>> Waiting() {
    std::vector<std::shared_ptr<Exchange>> out;
    std::lock_guard<std::mutex> lock(registry_mutex);
    for (const auto& [raw, x] : registry) {
      if (AnswerInProgress(*x)) out.push_back(x);
    }
    return out;
  }

  void MonitorLoop() {
    std::unique_lock<std::mutex> lock(monitor_mutex);
    auto next_head_check = Clock::now();
    while (!monitor_wake.wait_for(lock, kMonitorPeriod, [&] { return monitor_stop; })) {
      lock.unlock();
      if (Clock::now() >= next_head_check) {
        heads.ShutDownLate();
        next_head_check = Clock::now() + std::chrono::seconds(1);
      }
      std::vector<std::shared_ptr<Exchange>> waiting;
      std::vector<pollfd> fds;
      {
        // Polled under the registry's lock: an exchange still registered has its socket open.
        std::lock_guard<std::mutex> registry_lock(registry_mutex);
        for (const auto& [raw, x] : registry) {
          if (!AnswerInProgress(*x) || x->fd < 0) continue;
          waiting.push_back(x);
          fds.push_back(pollfd{.fd = x->fd, .events = POLLRDHUP, .revents = 0});
        }
        if (!fds.empty()) poll(fds.data(), fds.size(), 0);
      }
      for (size_t i = 0; i < fds.size(); ++i) {
        if ((fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0) continue;
        Exchange& x = *waiting[i];
        Log(LogLevel::kDebug, "HTTP: the client of ", x.request.path,
            " closed its connection: abandoning its answer");
        x.client_gone = true;
        AbandonAnswer(x, HttpAbandon::kClientGone);
        Wake(x);
      }
      lock.lock();
    }
  }

  void AbandonAll(HttpAbandon why) {
    abandoned_all = true;
    for (const std::shared_ptr<Exchange>& x : Waiting()) AbandonAnswer(*x, why);
  }

  // Resumes every suspended connection, so that libmicrohttpd can close it.
  void ResumeAll() {
    std::vector<std::shared_ptr<Exchange>> all;
    {
      std::lock_guard<std::mutex> lock(registry_mutex);
      for (const auto& [raw, x] : registry) all.push_back(x);
    }
    for (const std::shared_ptr<Exchange>& x : all) Wake(*x);
  }
};

HttpTransport::HttpTransport(HttpRouter router, HttpTransportOptions options)
    : router_(std::move(router)), options_(std::move(options)) {}

HttpTransport::~HttpTransport() { Stop(); }

absl::StatusOr<int> HttpTransport::Bind(const std::string& host, int port) {
  absl::StatusOr<ListeningSocket> listening = ListenOn(host, port);
  if (!listening.ok()) return listening.status();
  if (impl_ == nullptr) impl_ = std::make_unique<Impl>(this);
  if (impl_->listen_fd >= 0) close(impl_->listen_fd);
  impl_->listen_fd = listening->fd;
  return listening->port;
}

absl::Status HttpTransport::Start() {
  if (impl_ == nullptr || impl_->listen_fd < 0) {
    return absl::FailedPreconditionError("HTTP: Start before Bind");
  }
  // A write to a client that hung up must fail, not raise SIGPIPE and end the process.
  signal(SIGPIPE, SIG_IGN);
  // Every connection is a descriptor: take the hard limit, and keep some for the rest.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  const int64_t room = static_cast<int64_t>(files.rlim_cur) - 256;
  if (room < options_.max_connections) {
    Log(LogLevel::kWarning, "HTTP: at most ", std::max<int64_t>(room, 16),
        " connections (the descriptor limit is ", files.rlim_cur, "; raise it with ulimit -n)");
    options_.max_connections = static_cast<int>(std::max<int64_t>(room, 16));
  }
  unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                       MHD_USE_ERROR_LOG;
  if (options_.tls.enabled()) flags |= MHD_USE_TLS;
  std::vector<MHD_OptionItem> items = {
      {MHD_OPTION_LISTEN_SOCKET, impl_->listen_fd, nullptr},
      {MHD_OPTION_THREAD_POOL_SIZE, std::max(1, options_.event_threads), nullptr},
      {MHD_OPTION_CONNECTION_LIMIT, options_.max_connections, nullptr},
      {MHD_OPTION_CONNECTION_TIMEOUT, std::max(1, options_.idle_timeout_seconds), nullptr},
      {MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<intptr_t>(options_.max_header_bytes),
       nullptr},
      {MHD_OPTION_NOTIFY_COMPLETED, reinterpret_cast<intptr_t>(&Impl::OnCompleted), impl_.get()},
      {MHD_OPTION_NOTIFY_CONNECTION, reinterpret_cast<intptr_t>(&Impl::OnConnection), impl_.get()},
      {MHD_OPTION_EXTERNAL_LOGGER, reinterpret_cast<intptr_t>(&Impl::OnLog), nullptr},
  };
  if (options_.max_connections_per_client > 0) {
    items.push_back(
        {MHD_OPTION_PER_IP_CONNECTION_LIMIT, options_.max_connections_per_client, nullptr});
  }
  if (options_.tls.enabled()) {
    items.push_back(
        {MHD_OPTION_HTTPS_MEM_CERT, 0, const_cast<char*>(options_.tls.cert_pem.c_str())});
    items.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(options_.tls.key_pem.c_str())});
    if (options_.tls.verify_clients()) {
      items.push_back(
          {MHD_OPTION_HTTPS_MEM_TRUST, 0, const_cast<char*>(options_.tls.ca_pem.c_str())});
    }
  }
  items.push_back({MHD_OPTION_END, 0, nullptr});
  impl_->daemon = MHD_start_daemon(flags, 0, nullptr, nullptr, &Impl::OnAccess, impl_.get(),
                                   MHD_OPTION_ARRAY, items.data(), MHD_OPTION_END);
  if (impl_->daemon == nullptr) {
    return absl::InternalError(
        options_.tls.enabled()
            ? "HTTP: libmicrohttpd could not start (with TLS: are the certificate and key PEM?)"
            : "HTTP: libmicrohttpd could not start");
  }
  impl_->monitor = std::thread([impl = impl_.get()] { impl->MonitorLoop(); });
  return absl::OkStatus();
}

void HttpTransport::AbandonAll(HttpAbandon why) {
  if (impl_ != nullptr) impl_->AbandonAll(why);
}

void HttpTransport::Stop() {
  if (impl_ == nullptr) return;
  Impl& impl = *impl_;
  if (!impl.stopping.exchange(true)) {
    if (impl.daemon != nullptr) {
      {
        std::lock_guard<std::mutex> lock(impl.monitor_mutex);
        impl.monitor_stop = true;
      }
      impl.monitor_wake.notify_all();
      if (impl.monitor.joinable()) impl.monitor.join();
      // No MHD_quiesce_daemon here: with epoll and threads of its own, libmicrohttpd (0.9.75)
      // removes the listen socket from a worker's epoll set both in MHD_quiesce_daemon and in
      // that worker's event loop, unlocked, and the loser's failed removal aborts the process
      // ("Failed to remove listen FD from epoll set"; CI saw it once in a test's Stop). Stopping
      // without it accepts a few more connections at most, which MHD_stop_daemon closes with
      // the rest, and MHD_stop_daemon closes the listen socket too.
      // libmicrohttpd must not stop with connections suspended: wake them all; each one then
      // sees `stopping` and is closed.
      impl.ResumeAll();
      MHD_stop_daemon(impl.daemon);
      impl.daemon = nullptr;
      impl.listen_fd = -1;  // closed by MHD_stop_daemon
    }
    impl.workers.Stop();
    if (impl.listen_fd >= 0) close(impl.listen_fd);  // bound, never started
    impl.listen_fd = -1;
  }
}

}  // namespace ridge
