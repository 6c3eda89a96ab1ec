// The request-head deadline of HttpTransport (--http-header-timeout): every open connection's
// socket and since when it has been waiting for a request line and headers. A client that
// trickles bytes is never idle, so the idle time-out never closes it; this shuts its socket down
// at the deadline instead, and libmicrohttpd then reads the end and closes the connection.
//
// Keyed by the library's connection pointer (opaque here). Closed() must be called before the
// socket is closed (libmicrohttpd's close notification is): ShutDownLate() runs under the same
// lock, so it never reaches a descriptor number already reused.
#pragma once

#include <chrono>
#include <mutex>
#include <unordered_map>

namespace ridge {

class HeadDeadlines {
 public:
  explicit HeadDeadlines(std::chrono::seconds timeout) : timeout_(timeout) {}

  void Opened(const void* connection, int fd);  // waits for its first head from now
  void Closed(const void* connection);
  // Its request head is in (`waiting` false), or it now waits for the next one.
  void Waiting(const void* connection, bool waiting);
  // Shuts down (SHUT_RDWR) every socket past the deadline; once each.
  void ShutDownLate();

 private:
  using Clock = std::chrono::steady_clock;
  struct Head {
    int fd = -1;
    Clock::time_point since;  // max: not waiting
  };
  const std::chrono::seconds timeout_;
  std::mutex mutex_;
  std::unordered_map<const void*, Head> heads_;
};

}  // namespace ridge
