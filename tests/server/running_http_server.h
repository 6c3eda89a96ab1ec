// An HttpServer for the in-process HTTP tests: bound to a free loopback port, serving on a thread
// of its own and ready; stopped and joined when destroyed.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <thread>
#include <utility>

#include "server/http_server.h"

namespace ridge::testing {

class RunningHttpServer {
 public:
  // The arguments as HttpServer's, which must outlive this. Null (with a test failure) when the
  // server cannot bind.
  static std::unique_ptr<RunningHttpServer> Start(GenerationBackend* backend,
                                                  const Tokenizer* tokenizer,
                                                  const ChatTemplate* chat_template,
                                                  PrometheusMetrics* metrics,
                                                  HttpServerOptions options) {
    auto running =
        std::unique_ptr<RunningHttpServer>(new RunningHttpServer(std::make_unique<HttpServer>(
            backend, tokenizer, chat_template, metrics, std::move(options))));
    auto port = running->server_->Bind("127.0.0.1", 0);
    EXPECT_TRUE(port.ok()) << port.status();
    if (!port.ok()) return nullptr;
    running->port_ = *port;
    running->thread_ = std::thread([server = running->server_.get()] { server->Run(); });
    running->server_->SetReady(true);
    return running;
  }
  ~RunningHttpServer() {
    if (thread_.joinable()) {
      server_->Stop();
      thread_.join();
    }
  }

  HttpServer& server() { return *server_; }
  int port() const { return port_; }
  // A client of it that waits up to 10 s for an answer.
  std::unique_ptr<httplib::Client> Client() const {
    auto client = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client->set_read_timeout(10, 0);
    return client;
  }

 private:
  explicit RunningHttpServer(std::unique_ptr<HttpServer> server) : server_(std::move(server)) {}
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace ridge::testing
