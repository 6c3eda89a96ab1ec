// HttpTransport on its own (no model): slow and idle connections cannot starve the probes,
// thousands of streams are held without a thread each, answers that wait are woken from other
// threads, a client that hangs up abandons its answer, and the connection, header and body
// limits answer as documented.
#include "server/http_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/support/pushed_stream.h"

namespace ridge {
namespace {

using Clock = std::chrono::steady_clock;

int ThreadsOfThisProcess() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

void SendAll(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

// Reads until `needle` arrives, the peer closes, or `timeout`; returns what was read.
std::string ReadUntil(int fd, const std::string& needle, std::chrono::milliseconds timeout) {
  std::string got;
  const auto deadline = Clock::now() + timeout;
  while (got.find(needle) == std::string::npos && Clock::now() < deadline) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buffer[4096];
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    got.append(buffer, static_cast<size_t>(n));
  }
  return got;
}

// True when the peer closed `fd` within `timeout`.
bool ClosedByPeer(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buffer[4096];
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return true;
  }
  return false;
}

using TestStream = testing::PushedStream;
using testing::ConnectLoopback;

class TestPending final : public PendingReply {
 public:
  std::optional<HttpReply> Poll() override {
    if (!ready) return std::nullopt;
    HttpReply reply;
    reply.body = R"({"late":true})";
    return reply;
  }
  void Abandon(HttpAbandon why) override { abandoned = why == HttpAbandon::kClientGone ? 1 : 2; }
  std::atomic<bool> ready{false};
  std::atomic<int> abandoned{0};
};

// A transport with /health (inline), /slow (a worker that sleeps), /stream and /pending, whose
// answers the test holds.
class HttpTransportTest : public ::testing::Test {
 protected:
  void StartTransport(HttpTransportOptions options) {
    transport_ = std::make_unique<HttpTransport>(
        [this](const HttpRequest& head) { return Route(head); }, std::move(options));
    auto port = transport_->Bind("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    ASSERT_TRUE(transport_->Start().ok());
  }
  void TearDown() override {
    if (transport_ != nullptr) transport_->Stop();
  }

  HttpRoute Route(const HttpRequest& head) {
    HttpRoute route;
    if (head.path == "/health") {
      route.on_worker = false;
      route.handler = [](const HttpRequest&, const HttpWake&) {
        HttpReply reply;
        reply.body = R"({"status":"ok"})";
        return HttpResult(reply);
      };
    } else if (head.path == "/slow") {
      route.handler = [](const HttpRequest& request, const HttpWake&) {
        std::this_thread::sleep_for(std::chrono::seconds(2));
        HttpReply reply;
        reply.body = request.body;
        return HttpResult(reply);
      };
    } else if (head.path == "/echo") {
      route.handler = [](const HttpRequest& request, const HttpWake&) {
        HttpReply reply;
        reply.body = request.body;
        return HttpResult(reply);
      };
    } else if (head.path == "/stream") {
      route.handler = [this](const HttpRequest&, const HttpWake& wake) {
        HttpResult result;
        result.reply.content_type = "text/event-stream";
        auto stream = std::make_shared<TestStream>(wake);
        {
          std::lock_guard<std::mutex> lock(mutex_);
          streams_.push_back(stream);
        }
        result.stream = std::move(stream);
        return result;
      };
    } else if (head.path == "/pending") {
      route.handler = [this](const HttpRequest&, const HttpWake& wake) {
        HttpResult result;
        auto pending = std::make_shared<TestPending>();
        {
          std::lock_guard<std::mutex> lock(mutex_);
          pendings_.push_back(pending);
          wakes_.push_back(wake);
        }
        result.pending = std::move(pending);
        return result;
      };
    } else {
      HttpReply missing;
      missing.status = 404;
      route.refusal = missing;
    }
    return route;
  }

  size_t Count(bool streams) {
    std::lock_guard<std::mutex> lock(mutex_);
    return streams ? streams_.size() : pendings_.size();
  }
  bool WaitForCount(bool streams, size_t n) {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Count(streams) < n && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return Count(streams) >= n;
  }

  // /health through a fresh client, in well under a second.
  void ExpectHealthyQuickly() {
    httplib::Client client("127.0.0.1", port_);
    client.set_connection_timeout(1, 0);
    client.set_read_timeout(1, 0);
    const auto start = Clock::now();
    auto answer = client.Get("/health");
    ASSERT_TRUE(answer) << httplib::to_string(answer.error());
    EXPECT_EQ(answer->status, 200);
    EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(500));
  }

  std::unique_ptr<HttpTransport> transport_;
  int port_ = 0;
  std::mutex mutex_;
  std::vector<std::shared_ptr<TestStream>> streams_;
  std::vector<std::shared_ptr<TestPending>> pendings_;
  std::vector<HttpWake> wakes_;
};

TEST_F(HttpTransportTest, SlowAndIdleConnectionsDoNotStarveTheProbes) {
  HttpTransportOptions options;
  options.worker_threads = 1;
  StartTransport(options);
  // 300 connections that sent half a request line or half their headers, and one that trickles.
  std::vector<int> slow;
  for (int i = 0; i < 300; ++i) {
    const int fd = ConnectLoopback(port_);
    ASSERT_GE(fd, 0);
    SendAll(fd, i % 2 == 0 ? "GET /hea" : "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Le");
    slow.push_back(fd);
  }
  // The only worker busy for 2 s.
  std::thread busy([&] {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(10, 0);
    client.Post("/slow", "x", "text/plain");
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int i = 0; i < 5; ++i) {
    SendAll(slow[0], "l");
    ExpectHealthyQuickly();
  }
  busy.join();
  for (int fd : slow) close(fd);
}

// Stopping under load neither aborts nor hangs: each of 300 transports is stopped while two
// clients keep its workers busy. (Stop once called MHD_quiesce_daemon, which in libmicrohttpd
// 0.9.75 races a worker's event loop for the listen socket under epoll and calls abort() when it
// loses, "Failed to remove listen FD from epoll set": CI met it once in a test's Stop. That race
// is too narrow for this test to meet reliably; a bare libmicrohttpd program that starts,
// quiesces and stops a daemon 3,000 times met it in 2 runs of 3.)
TEST_F(HttpTransportTest, StopsWhileClientsKeepItBusy) {
  for (int i = 0; i < 300; ++i) {
    StartTransport(HttpTransportOptions{});
    std::atomic<bool> stop{false};
    std::atomic<int> answered{0};
    std::vector<std::thread> clients;
    for (int c = 0; c < 2; ++c) {
      clients.emplace_back([&] {
        httplib::Client client("127.0.0.1", port_);
        client.set_connection_timeout(1, 0);
        while (!stop) {
          if (auto reply = client.Get("/health"); reply && reply->status == 200) ++answered;
        }
      });
    }
    while (answered < 4) std::this_thread::sleep_for(std::chrono::microseconds(100));
    transport_->Stop();
    stop = true;
    for (std::thread& t : clients) t.join();
    transport_.reset();
  }
}

// A client that sends its request head a byte at a time, never idle long enough for the idle
// time-out, is closed at the head deadline; a keep-alive connection that sends its next request
// within the deadline keeps working.
TEST_F(HttpTransportTest, ASlowRequestHeadIsClosedAtItsDeadline) {
  HttpTransportOptions options;
  options.header_timeout_seconds = 2;
  StartTransport(options);
  const int slow = ConnectLoopback(port_);
  const int prompt = ConnectLoopback(port_);
  SendAll(slow, "GET /hea");
  const std::string head = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  SendAll(prompt, head);
  EXPECT_NE(ReadUntil(prompt, "\"ok\"", std::chrono::seconds(2)).find("\"ok\""), std::string::npos);
  const auto start = Clock::now();
  bool closed = false;
  bool asked_again = false;
  while (!closed && Clock::now() - start < std::chrono::seconds(8)) {
    SendAll(slow, "l");  // a byte every 200 ms: never idle
    closed = ClosedByPeer(slow, std::chrono::milliseconds(200));
    if (!asked_again && Clock::now() - start > std::chrono::seconds(1)) {
      // The keep-alive connection's next request, within its deadline, on the same socket.
      asked_again = true;
      SendAll(prompt, head);
      EXPECT_NE(ReadUntil(prompt, "\"ok\"", std::chrono::seconds(2)).find("\"ok\""),
                std::string::npos);
    }
  }
  EXPECT_TRUE(closed);
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(1500));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  close(slow);
  close(prompt);
}

TEST_F(HttpTransportTest, IdleConnectionsTimeOutAndLimitsHold) {
  HttpTransportOptions options;
  options.idle_timeout_seconds = 1;
  options.max_connections_per_client = 20;
  options.max_body_bytes = 1000;
  options.max_header_bytes = 8 << 10;
  StartTransport(options);

  const int idle = ConnectLoopback(port_);
  SendAll(idle, "GET /health HTTP/1.1\r\n");
  EXPECT_TRUE(ClosedByPeer(idle, std::chrono::seconds(4)));
  close(idle);

  // Past 20 connections from one address, new ones are closed at once.
  std::vector<int> held;
  for (int i = 0; i < 20; ++i) held.push_back(ConnectLoopback(port_));
  const int extra = ConnectLoopback(port_);
  EXPECT_TRUE(ClosedByPeer(extra, std::chrono::seconds(2)));
  close(extra);
  for (int fd : held) close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  httplib::Client client("127.0.0.1", port_);
  auto too_long = client.Post("/echo", std::string(2000, 'x'), "text/plain");
  ASSERT_TRUE(too_long);
  EXPECT_EQ(too_long->status, 413);
  EXPECT_NE(too_long->body.find("larger than the limit of 1000 bytes"), std::string::npos);
  auto fits = client.Post("/echo", std::string(1000, 'y'), "text/plain");
  ASSERT_TRUE(fits);
  EXPECT_EQ(fits->body, std::string(1000, 'y'));

  // Headers past the limit: a 4xx, never a crash.
  httplib::Headers big = {{"X-Big", std::string(16 << 10, 'h')}};
  auto too_big = client.Get("/health", big);
  if (too_big) {
    EXPECT_GE(too_big->status, 400);
    EXPECT_LT(too_big->status, 500);
  }
  ExpectHealthyQuickly();
}

// A refused request (here 404) keeps its keep-alive connection: the next request on it is
// answered; a refused request's body is read and thrown away, so its client gets the answer, not
// a reset; a chunked body past the limit gets 413.
TEST_F(HttpTransportTest, RefusalsKeepTheConnectionAndReadTheBody) {
  HttpTransportOptions options;
  options.max_body_bytes = 1 << 20;
  StartTransport(options);
  const int fd = ConnectLoopback(port_);
  SendAll(fd, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string both = ReadUntil(fd, "\"ok\"", std::chrono::seconds(5));
  EXPECT_NE(both.find("HTTP/1.1 404"), std::string::npos) << both;
  EXPECT_NE(both.find(R"({"status":"ok"})"), std::string::npos) << both;
  close(fd);

  const int upload = ConnectLoopback(port_);
  const std::string body(512 << 10, 'b');
  SendAll(upload, "POST /nope HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_NE(ReadUntil(upload, "HTTP/1.1 404", std::chrono::seconds(5)).find("HTTP/1.1 404"),
            std::string::npos);
  close(upload);

  const int chunked = ConnectLoopback(port_);
  SendAll(chunked, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  const std::string piece(256 << 10, 'c');
  char size_line[32];
  std::snprintf(size_line, sizeof(size_line), "%zx\r\n", piece.size());
  for (int i = 0; i < 5; ++i) SendAll(chunked, size_line + piece + "\r\n");
  SendAll(chunked, "0\r\n\r\n");
  const std::string answer = ReadUntil(chunked, "bytes", std::chrono::seconds(5));
  EXPECT_NE(answer.find("HTTP/1.1 413"), std::string::npos) << answer.substr(0, 200);
  close(chunked);
  ExpectHealthyQuickly();
}

TEST_F(HttpTransportTest, ThousandsOfStreamsWithoutAThreadEach) {
  HttpTransportOptions options;
  options.worker_threads = 4;
  // The bound on a closed client's socket when libmicrohttpd misses its end (below).
  options.idle_timeout_seconds = 3;
  StartTransport(options);
  const int threads_before = ThreadsOfThisProcess();
  // Two descriptors a stream here (client and server); Start raised the soft limit to the hard.
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  const int kStreams = static_cast<int>(std::min<rlim_t>(2000, (files.rlim_cur - 200) / 2));
  ASSERT_GE(kStreams, 400) << "descriptor limit " << files.rlim_cur;
  std::vector<int> clients;
  for (int i = 0; i < kStreams; ++i) {
    const int fd = ConnectLoopback(port_);
    ASSERT_GE(fd, 0) << i;
    SendAll(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    clients.push_back(fd);
  }
  ASSERT_TRUE(WaitForCount(true, kStreams));
  EXPECT_LE(ThreadsOfThisProcess(), threads_before + 2);
  ExpectHealthyQuickly();
  // Every stream gets its own bytes, pushed from this thread, then ends.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int i = 0; i < kStreams; ++i) streams_[i]->Push("data: first\n\n", false);
  }
  int first = 0;
  for (int fd : clients)
    first += ReadUntil(fd, "first", std::chrono::seconds(10)).find("first") != std::string::npos;
  EXPECT_EQ(first, kStreams);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int i = 0; i < kStreams; ++i) streams_[i]->Push("data: [DONE]\n\n", true);
  }
  int done = 0;
  for (int fd : clients) {
    done +=
        ReadUntil(fd, "0\r\n\r\n", std::chrono::seconds(10)).find("[DONE]") != std::string::npos;
    close(fd);
  }
  EXPECT_EQ(done, kStreams);
  // libmicrohttpd 0.9.75 (Debian 12) in epoll mode can miss a client's end on a keep-alive
  // connection (upstream's 08f933a6, in 1.0.0, "immediately notice when other side closes the
  // socket, instead of waiting for timeout"); CI once saw 512 of 2000 still open after 5 s. Such a
  // socket is closed at the idle time-out, which this asserts: no closed client's socket outlives
  // it. How many outlived the quick close is printed for the log.
  const auto WaitForNoConnections = [&](std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (transport_->open_connections() > 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return transport_->open_connections();
  };
  const int64_t lingering = WaitForNoConnections(std::chrono::seconds(2));
  if (lingering > 0)
    std::fprintf(stderr, "%lld closed clients' sockets lingered past 2 s\n",
                 static_cast<long long>(lingering));
  EXPECT_EQ(WaitForNoConnections(std::chrono::seconds(options.idle_timeout_seconds + 5)), 0);
}

TEST_F(HttpTransportTest, PendingRepliesAreWokenFromAnyThread) {
  StartTransport({});
  std::thread client([&] {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10, 0);
    auto answer = c.Get("/pending");
    ASSERT_TRUE(answer);
    EXPECT_EQ(answer->body, R"({"late":true})");
  });
  ASSERT_TRUE(WaitForCount(false, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pendings_[0]->ready = true;
    // Wakes from two threads at once, and again after the answer: all harmless.
    std::thread other(wakes_[0]);
    wakes_[0]();
    other.join();
  }
  client.join();
  std::lock_guard<std::mutex> lock(mutex_);
  wakes_[0]();
  EXPECT_EQ(pendings_[0]->abandoned, 0);
}

TEST_F(HttpTransportTest, AClientThatHangsUpAbandonsItsAnswer) {
  StartTransport({});
  const int pending_client = ConnectLoopback(port_);
  SendAll(pending_client, "GET /pending HTTP/1.1\r\nHost: x\r\n\r\n");
  const int stream_client = ConnectLoopback(port_);
  SendAll(stream_client, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(WaitForCount(false, 1));
  ASSERT_TRUE(WaitForCount(true, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  close(pending_client);
  close(stream_client);
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  while ((pendings_[0]->abandoned == 0 || streams_[0]->abandoned == 0) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(pendings_[0]->abandoned, 1);
  EXPECT_EQ(streams_[0]->abandoned, 1);
}

TEST_F(HttpTransportTest, StopAbandonsWaitingAnswersAndReturns) {
  StartTransport({});
  std::vector<int> clients;
  for (const char* path : {"/pending", "/stream", "/pending"}) {
    clients.push_back(ConnectLoopback(port_));
    SendAll(clients.back(), std::string("GET ") + path + " HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  ASSERT_TRUE(WaitForCount(false, 2));
  ASSERT_TRUE(WaitForCount(true, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  transport_->AbandonAll(HttpAbandon::kShutdown);
  EXPECT_EQ(pendings_[0]->abandoned, 2);
  EXPECT_EQ(streams_[0]->abandoned, 2);
  const auto start = Clock::now();
  transport_->Stop();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  for (int fd : clients) {
    EXPECT_TRUE(ClosedByPeer(fd, std::chrono::seconds(2)));
    close(fd);
  }
}

}  // namespace
}  // namespace ridge
