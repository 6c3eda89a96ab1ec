// Runs the real `ridgeserve serve` binary for integration tests: on a free loopback port
// (--http-port 0, read back from the start-up log), waits for /ready, and signals or kills it.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ridge::testing {

class ServerProcess {
 public:
  // Starts `binary serve ARGS... --http-port 0` with its output in `log`; returns null (and
  // the log in *error) when it does not become ready within `timeout`. `ready` asks the server
  // on its port (default: plain HTTP GET /ready answers 200, each try given 2 s, so that one
  // lost connection cannot use up the whole wait; the last answer goes into *error).
  static std::unique_ptr<ServerProcess> Start(
      const std::string& binary, const std::vector<std::string>& args,
      const std::filesystem::path& log, std::string* error,
      std::chrono::seconds timeout = std::chrono::seconds(60),
      std::function<bool(int port)> ready = nullptr) {
    std::string last_answer = "none";
    if (!ready) {
      ready = [&last_answer](int port) {
        httplib::Client client("127.0.0.1", port);
        client.set_connection_timeout(2, 0);
        client.set_read_timeout(2, 0);
        client.set_write_timeout(2, 0);
        auto answer = client.Get("/ready");
        last_answer = answer ? "HTTP " + std::to_string(answer->status) + " " + answer->body
                             : "no answer: " + httplib::to_string(answer.error());
        return answer && answer->status == 200;
      };
    }
    std::vector<std::string> argv_strings = {binary, "serve"};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    argv_strings.insert(argv_strings.end(), {"--http-port", "0", "--host", "127.0.0.1"});
    std::vector<char*> argv;
    for (auto& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    // Emptied here, before the child starts: read before the child truncated it, a log left by an
    // earlier server at this path (a directory named by a reused pid) gave that server's port,
    // and this one was then never ready (a fresh clone met it twice: "no answer: Connection").
    std::ofstream(log, std::ios::trunc).close();
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    auto server = std::unique_ptr<ServerProcess>(new ServerProcess(pid, log));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const std::regex serving("serving model '[^']*' on https?://[0-9.]+:([0-9]+)");
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch m;
      const std::string text = server->Log();
      if (server->port_ == 0 && std::regex_search(text, m, serving)) {
        server->port_ = std::stoi(m[1]);
      }
      if (server->port_ != 0 && ready(server->port_)) return server;
      int status;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        server->pid_ = -1;
        *error = "server exited during start-up:\n" + text;
        return nullptr;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    *error = "server not ready in time (last /ready: " + last_answer + "; port " +
             std::to_string(server->port_) +
             " listed as listening: " + (ListedAsListening(server->port_) ? "yes" : "no") + "):\n" +
             server->Log();
    return nullptr;
  }

  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  int port() const { return port_; }

  // The gRPC port the server says it listens on (started with --grpc-port 0, it picks a free
  // one), or 0. A port picked here and handed to the server raced other tests' servers for it:
  // a fresh clone's CI run met "cannot listen on '127.0.0.1:43847' (port in use)".
  int GrpcPort() const {
    static const std::regex grpc_serving(R"(gRPC: serving \S+ on \S+ \(port ([0-9]+))");
    std::smatch m;
    const std::string text = Log();
    return std::regex_search(text, m, grpc_serving) ? std::stoi(m[1]) : 0;
  }

  // Whether /proc/net/tcp or tcp6 lists a socket listening on `port`.
  static bool ListedAsListening(int port) {
    for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
      std::ifstream in(table);
      std::string line;
      std::getline(in, line);  // the header
      while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string slot, local, remote, state;
        fields >> slot >> local >> remote >> state;
        const size_t colon = local.rfind(':');
        if (colon == std::string::npos || state != "0A") continue;  // 0A: LISTEN
        if (std::stoi(local.substr(colon + 1), nullptr, 16) == port) return true;
      }
    }
    return false;
  }
  void Signal(int signal_number) { kill(pid_, signal_number); }

  // Waits for exit; the exit code, or -1 on timeout / abnormal exit.
  int Wait(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  ServerProcess(pid_t pid, std::filesystem::path log) : pid_(pid), log_(std::move(log)) {}
  pid_t pid_;
  std::filesystem::path log_;
  int port_ = 0;
};

}  // namespace ridge::testing
