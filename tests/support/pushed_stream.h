// For tests and benchmarks of the HTTP transport: a StreamBody whose bytes the caller pushes from
// any thread (waking the connection), and a blocking loopback connect.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include "server/http_types.h"

namespace ridge::testing {

class PushedStream final : public StreamBody {
 public:
  explicit PushedStream(HttpWake wake) : wake_(std::move(wake)) {}

  // Appends `bytes` (one event), ends the body after them when `last`, and wakes the connection.
  void Push(const std::string& bytes, bool last) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_ += bytes;
      ++pushed_;
      last_ = last;
    }
    wake_();
  }
  bool Read(std::string* out) override {
    std::lock_guard<std::mutex> lock(mutex_);
    out->append(ready_);
    ready_.clear();
    taken += pushed_;
    pushed_ = 0;
    return !last_;
  }
  void Abandon(HttpAbandon why) override { abandoned = why == HttpAbandon::kClientGone ? 1 : 2; }

  std::atomic<int64_t> taken{0};  // events the transport has read
  std::atomic<int> abandoned{0};  // 0: not; 1: client gone; 2: shutdown

 private:
  HttpWake wake_;
  std::mutex mutex_;
  std::string ready_;
  int64_t pushed_ = 0;
  bool last_ = false;
};

// A TCP connection to 127.0.0.1:port, or -1.
inline int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace ridge::testing
