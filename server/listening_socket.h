// The HTTP server's listening socket, made by the server (not by libmicrohttpd) so that its
// options are ours: SO_REUSEADDR but not SO_REUSEPORT (a second server on the port fails instead
// of sharing it silently), a backlog of SOMAXCONN, and TCP_NODELAY, which accepted sockets
// inherit (with Nagle's algorithm each small event could wait up to 40 ms for the client's
// acknowledgement of the one before).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace ridge {

struct ListeningSocket {
  int fd = -1;
  int port = 0;  // as bound (port 0 asked: the free port taken)
};

// Listens on host:port (host empty: every address; port 0: a free one). UNAVAILABLE naming the
// address when that fails.
absl::StatusOr<ListeningSocket> ListenOn(const std::string& host, int port);

}  // namespace ridge
