// What the HTTP transport (server/http_transport.h) and the routes above it exchange: a request
// read whole, and an answer that is either ready, comes later as one body, or streams. No
// library's types appear here, so the routes do not depend on the transport's library.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ridge {

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string path;                            // without the query string
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;

  std::string Header(const std::string& lower_case_name) const {
    auto it = headers.find(lower_case_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// Why the transport gives up on an answer still being produced.
enum class HttpAbandon {
  kClientGone,  // the client closed its connection (or a write to it failed)
  kShutdown,    // the server stops, or its drain period ended
};

// Wakes the connection of an answer that is waiting: the transport then asks the answer again
// (PendingReply::Poll, StreamBody::Read) on one of its event threads. Safe from any thread, at
// any time, also after the connection is gone (it then does nothing); a wake before the answer
// is first asked is not lost.
using HttpWake = std::function<void()>;

// An answer whose status and body are known only later (a non-streaming generation).
class PendingReply {
 public:
  virtual ~PendingReply() = default;
  // Called on an event thread when woken (and once at first): the reply when it is ready.
  virtual std::optional<HttpReply> Poll() = 0;
  // The transport will not ask again: stop producing (cancel the work behind it).
  virtual void Abandon(HttpAbandon why) = 0;
};

// An answer whose status and headers are sent at once and whose body follows bit by bit (SSE).
class StreamBody {
 public:
  virtual ~StreamBody() = default;
  // Called on an event thread when woken (and once at first): appends the bytes ready now to
  // `out`; false when the body is complete (after what it appended).
  virtual bool Read(std::string* out) = 0;
  // The body will not be read to its end (the client left, or shutdown); stop producing.
  virtual void Abandon(HttpAbandon why) = 0;
};

// What a route answers: `reply` alone, or `pending`, or `stream` (sent with `reply`'s status,
// content type and headers).
struct HttpResult {
  HttpReply reply;
  std::shared_ptr<PendingReply> pending;
  std::shared_ptr<StreamBody> stream;

  HttpResult() = default;
  HttpResult(HttpReply r) : reply(std::move(r)) {}  // NOLINT: a ready reply is a result
};

}  // namespace ridge
