#include "server/connection_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>

namespace ridge {
namespace {

// The peer of socket `fd` as text and port; false for anything that is not a connected IP socket.
bool PeerOf(int fd, std::string* address, int* port) {
  sockaddr_storage peer{};
  socklen_t length = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) return false;
  char text[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&peer);
    if (inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text)) == nullptr) return false;
    *port = ntohs(v4->sin_port);
  } else if (peer.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&peer);
    if (inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text)) == nullptr) return false;
    *port = ntohs(v6->sin6_port);
  } else {
    return false;
  }
  *address = text;
  return true;
}

}  // namespace

bool ConnectionWatch::found() {
  if (looked_) return fd_ >= 0;
  looked_ = true;
  if (remote_port_ <= 0) return false;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return false;
  const int listing = dirfd(dir);
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == listing) continue;
    std::string address;
    int port = 0;
    if (PeerOf(static_cast<int>(fd), &address, &port) && port == remote_port_ &&
        address == remote_addr_) {
      fd_ = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return fd_ >= 0;
}

bool ConnectionWatch::ClientGone() {
  if (!found()) return false;
  pollfd p{.fd = fd_, .events = POLLRDHUP, .revents = 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace ridge
