// What HttpTransport itself costs a streamed event, without a model or JSON: N streams are held
// open by raw-socket clients; a producer thread (standing for the engine's delivery thread) gives
// each stream one event of B bytes per round and waits until the transport has taken every one
// of them (as an engine step's events are); a probe asks /health every 20 ms meanwhile.
//
//   build/tools/bench/http_transport_bench [--streams 4096] [--rounds 200] [--bytes 200]
//                                          [--event-threads 4]
//
// Prints events/s, the event threads' time per event, and the probe's latency percentiles.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/http_transport.h"
#include "tests/support/pushed_stream.h"

namespace ridge {
namespace {

using Clock = std::chrono::steady_clock;

using BenchStream = testing::PushedStream;
using testing::ConnectLoopback;

double ProbeOnce(int port) {
  const auto start = Clock::now();
  const int fd = ConnectLoopback(port);
  if (fd < 0) return -1;
  const char request[] = "GET /health HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n";
  send(fd, request, sizeof(request) - 1, MSG_NOSIGNAL);
  char buffer[512];
  while (recv(fd, buffer, sizeof(buffer), 0) > 0) {
  }
  close(fd);
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q / 100.0 * (v.size() - 1) + 0.5))];
}

int Run(int streams, int rounds, int bytes, int event_threads) {
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  std::mutex mutex;
  std::vector<std::shared_ptr<BenchStream>> bodies;
  HttpTransportOptions options;
  options.event_threads = event_threads;
  options.max_connections = streams + 64;
  HttpTransport transport(
      [&](const HttpRequest& head) {
        HttpRoute route;
        route.on_worker = false;
        if (head.path == "/health") {
          route.handler = [](const HttpRequest&, const HttpWake&) {
            HttpReply reply;
            reply.body = R"({"status":"ok"})";
            return HttpResult(reply);
          };
        } else {
          route.handler = [&](const HttpRequest&, const HttpWake& wake) {
            HttpResult result;
            result.reply.content_type = "text/event-stream";
            auto body = std::make_shared<BenchStream>(wake);
            std::lock_guard<std::mutex> lock(mutex);
            bodies.push_back(body);
            result.stream = body;
            return result;
          };
        }
        return route;
      },
      options);
  auto port = transport.Bind("127.0.0.1", 0);
  if (!port.ok() || !transport.Start().ok()) {
    std::fprintf(stderr, "cannot start the transport\n");
    return 1;
  }
  // The clients: one thread reads every socket with epoll and throws the bytes away.
  const int epoll = epoll_create1(0);
  std::vector<int> clients;
  const std::string request = "GET /stream HTTP/1.1\r\nHost: b\r\n\r\n";
  for (int i = 0; i < streams; ++i) {
    const int fd = ConnectLoopback(*port);
    if (fd < 0) {
      std::fprintf(stderr, "connect %d failed\n", i);
      return 1;
    }
    send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    epoll_event event{.events = EPOLLIN, .data = {.fd = fd}};
    epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event);
    clients.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    std::vector<epoll_event> ready(1024);
    char buffer[65536];
    while (!stop) {
      const int n = epoll_wait(epoll, ready.data(), static_cast<int>(ready.size()), 50);
      for (int i = 0; i < n; ++i) {
        if (recv(ready[i].data.fd, buffer, sizeof(buffer), 0) <= 0) {
          epoll_ctl(epoll, EPOLL_CTL_DEL, ready[i].data.fd, nullptr);
        }
      }
    }
  });
  while (true) {
    std::lock_guard<std::mutex> lock(mutex);
    if (static_cast<int>(bodies.size()) == streams) break;
  }
  std::vector<double> probes;
  std::thread probe([&] {
    while (!stop) {
      probes.push_back(ProbeOnce(*port));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const std::string event = "data: " + std::string(std::max(0, bytes - 8), 'x') + "\n\n";
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const auto start = Clock::now();
  for (int r = 0; r < rounds; ++r) {
    for (auto& body : bodies) body->Push(event, r + 1 == rounds);
    const int64_t target = static_cast<int64_t>(r + 1) * streams;
    const auto taken = [&] {
      int64_t sum = 0;
      for (const auto& body : bodies) sum += body->taken.load();
      return sum;
    };
    while (taken() < target) std::this_thread::yield();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  stop = true;
  probe.join();
  reader.join();
  for (int fd : clients) close(fd);
  transport.Stop();
  const auto cpu = [](const rusage& u) {
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
  };
  const double events = static_cast<double>(streams) * rounds;
  std::printf(
      "streams %d, rounds %d, %d-byte events, %d event threads: %.0f events/s, round %.2f ms; "
      "process CPU %.1f us/event (all threads, clients included)\n"
      "/health during the load (%zu probes): p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
      streams, rounds, bytes, event_threads, events / seconds, 1000 * seconds / rounds,
      1e6 * (cpu(after) - cpu(before)) / events, probes.size(), Percentile(probes, 50),
      Percentile(probes, 99), Percentile(probes, 100));
  return 0;
}

}  // namespace
}  // namespace ridge

int main(int argc, char** argv) {
  int streams = 4096, rounds = 200, bytes = 200, event_threads = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--streams")
      streams = value;
    else if (flag == "--rounds")
      rounds = value;
    else if (flag == "--bytes")
      bytes = value;
    else if (flag == "--event-threads")
      event_threads = value;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (streams < 1 || rounds < 1 || bytes < 8 || event_threads < 1) {
    std::fprintf(stderr, "--streams, --rounds, --event-threads >= 1; --bytes >= 8\n");
    return 2;
  }
  return ridge::Run(streams, rounds, bytes, event_threads);
}
