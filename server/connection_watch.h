// Whether the client of an HTTP request is still there. cpp-httplib (0.11, Debian 12) tells a
// handler nothing about its connection but the peer's address and port, and a non-streaming
// handler writes nothing until the answer is ready, so a client that hung up went unnoticed and
// its request ran to the end. ConnectionWatch finds the request's socket among the process's
// open descriptors by its peer address and then polls it: the peer's FIN or a reset means the
// client is gone. The socket stays open (cpp-httplib closes it only after the handler returns),
// so its descriptor cannot be reused meanwhile.
#pragma once

#include <string>
#include <utility>

namespace ridge {

class ConnectionWatch {
 public:
  // Watches the connected TCP socket of this process whose peer is remote_addr:remote_port
  // (IPv4 or IPv6 text, as cpp-httplib gives it). The socket is looked for on first use (a scan
  // of the open descriptors, so a request that never asks pays nothing); where there is none,
  // the watch never reports the client gone.
  ConnectionWatch(std::string remote_addr, int remote_port)
      : remote_addr_(std::move(remote_addr)), remote_port_(remote_port) {}

  bool found();
  // True once the peer closed its side or reset the connection (data still unread, such as a
  // pipelined next request, does not count).
  bool ClientGone();

 private:
  std::string remote_addr_;
  int remote_port_;
  bool looked_ = false;
  int fd_ = -1;
};

}  // namespace ridge
