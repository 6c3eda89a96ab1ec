// One HTTP request and its answer inside HttpTransport (server/http_transport.cc), and the
// wake-up protocol between libmicrohttpd's event threads and whoever produces the answer.
// Internal to the transport.
#pragma once

#include <microhttpd.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "server/http_transport.h"
#include "server/http_types.h"

namespace ridge::http_internal {

enum class Stage { kReceiving, kWorking, kPending, kStreaming, kDone };

// One request and its answer. Owned by the transport's registry from its headers to its end
// (and by a worker job, and by a streamed response, while they run).
struct Exchange : std::enable_shared_from_this<Exchange> {
  MHD_Connection* connection = nullptr;
  int fd = -1;
  HttpRequest request;
  HttpRoute route;
  std::atomic<Stage> stage{Stage::kReceiving};
  std::optional<HttpReply> refusal;  // sent once the body is read (and thrown away)
  size_t discarded = 0;              // body bytes thrown away
  std::shared_ptr<PendingReply> pending;
  std::shared_ptr<StreamBody> stream;
  // The streamed bytes not yet taken by libmicrohttpd (event thread only).
  std::string out;
  size_t out_pos = 0;
  bool stream_ended = false;
  std::atomic<bool> client_gone{false};
  const std::atomic<bool>* stopping = nullptr;  // the transport's

  // Suspension and wake-ups, between the event thread and anyone who wakes it.
  std::mutex mutex;
  bool suspended = false;
  bool woken = false;
  bool closed = false;               // libmicrohttpd is done with the connection's request
  std::optional<HttpResult> result;  // a worker's answer, waiting for the event thread
};

// Wakes `x`'s connection if it is suspended; otherwise remembers the wake for its next look.
inline void Wake(Exchange& x) {
  // The resume happens under the lock, so that once `suspended` reads false libmicrohttpd has
  // been told (Stop relies on it: a connection still suspended at MHD_stop_daemon aborts the
  // process). libmicrohttpd takes only its own cleanup mutex in there and calls none of our
  // callbacks under it, so this cannot deadlock.
  std::lock_guard<std::mutex> lock(x.mutex);
  x.woken = true;
  if (x.suspended && !x.closed) {
    x.suspended = false;
    MHD_resume_connection(x.connection);
  }
}

inline HttpWake WakeOf(const std::shared_ptr<Exchange>& x) {
  return [weak = std::weak_ptr<Exchange>(x)] {
    if (auto strong = weak.lock()) Wake(*strong);
  };
}

inline void AbandonAnswer(Exchange& x, HttpAbandon why) {
  if (x.pending != nullptr) x.pending->Abandon(why);
  if (x.stream != nullptr) x.stream->Abandon(why);
}

// A route's answer that will never be sent (its connection closed, or the server stops).
inline void AbandonResult(HttpResult& result, HttpAbandon why) {
  if (result.pending != nullptr) result.pending->Abandon(why);
  if (result.stream != nullptr) result.stream->Abandon(why);
}

// Its answer is being produced for a client still there: what the monitor watches and
// AbandonAll reaches.
inline bool AnswerInProgress(const Exchange& x) {
  const Stage stage = x.stage.load();
  return (stage == Stage::kPending || stage == Stage::kStreaming) && !x.client_gone;
}

// On the event thread: suspends the connection until a wake and returns true, unless a wake
// came since the last look or the transport stops (then false: look again; a suspension while
// stopping could outlive libmicrohttpd's stop).
inline bool SuspendUnlessWoken(Exchange& x) {
  std::lock_guard<std::mutex> lock(x.mutex);
  if (x.woken || *x.stopping) {
    x.woken = false;
    return false;
  }
  x.suspended = true;
  MHD_suspend_connection(x.connection);
  return true;
}

}  // namespace ridge::http_internal
