#include "server/head_deadlines.h"

#include <sys/socket.h>

#include "base/logging.h"

namespace ridge {

void HeadDeadlines::Opened(const void* connection, int fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  heads_[connection] = {fd, Clock::now()};
}

void HeadDeadlines::Closed(const void* connection) {
  std::lock_guard<std::mutex> lock(mutex_);
  heads_.erase(connection);
}

void HeadDeadlines::Waiting(const void* connection, bool waiting) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = heads_.find(connection);
  if (it != heads_.end()) it->second.since = waiting ? Clock::now() : Clock::time_point::max();
}

void HeadDeadlines::ShutDownLate() {
  const Clock::time_point deadline = Clock::now() - timeout_;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [connection, head] : heads_) {
    if (head.since >= deadline) continue;
    Log(LogLevel::kDebug, "HTTP: no request head within ", timeout_.count(),
        " s: closing the connection");
    shutdown(head.fd, SHUT_RDWR);
    head.since = Clock::time_point::max();
  }
}

}  // namespace ridge
