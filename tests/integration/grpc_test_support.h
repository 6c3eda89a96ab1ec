// What the gRPC end-to-end tests share: a model, engine and GrpcServer in this process on a
// loopback port with a client stub (Stack), and small client calls.
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "models/mesanet_model.h"
#include "ridgeserve/v1/generation.grpc.pb.h"
#include "server/grpc_service.h"
#include "tests/support/tiny_tokenizer.h"

namespace ridge::testing {

namespace v1 = ::ridgeserve::v1;
using namespace std::chrono_literals;

inline constexpr char kCheckpoint[] = RIDGE_TEST_DATA_DIR "/mesanet/d64_untied";

// Polls `done` until it holds or 20 s pass.
inline bool WaitFor(const std::function<bool()>& done) {
  const auto limit = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < limit) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

// One model, engine and server, with a client stub connected to it.
struct Stack {
  std::unique_ptr<MesaNetModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<GrpcServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Generation::Stub> stub;

  static std::unique_ptr<Stack> Start(EngineOptions options, bool with_tokenizer,
                                      ApiKeys keys = {}) {
    auto stack = std::make_unique<Stack>();
    auto model = MesaNetModel::Load(kCheckpoint);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return nullptr;
    stack->model = std::move(*model);
    if (with_tokenizer) {
      auto tokenizer = LoadTinyTokenizer(RIDGE_TEST_DATA_DIR);
      EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
      if (!tokenizer.ok()) return nullptr;
      stack->tokenizer = std::move(*tokenizer);
    }
    auto engine = Engine::Create(stack->model.get(), options, nullptr);
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok()) return nullptr;
    stack->engine = std::move(*engine);
    auto server = GrpcServer::Start(
        stack->engine.get(), stack->tokenizer.get(),
        GrpcServerOptions{
            .address = "127.0.0.1:0", .model_name = "d64_untied", .api_keys = std::move(keys)});
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return nullptr;
    stack->server = std::move(*server);
    stack->channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", stack->server->port()),
                                         grpc::InsecureChannelCredentials());
    stack->stub = v1::Generation::NewStub(stack->channel);
    return stack;
  }

  ~Stack() {
    if (server) server->Shutdown(std::chrono::steady_clock::now() + 2s);
  }

  bool Idle() const {
    const EngineSnapshot s = engine->Snapshot();
    return s.slots_used == 0 && s.running == 0 && s.waiting == 0;
  }
};

inline v1::GenerateRequest IdsRequest(std::vector<int32_t> ids, int32_t max_tokens, uint64_t seed) {
  v1::GenerateRequest r;
  for (int32_t id : ids) r.mutable_token_ids()->add_ids(id);
  r.mutable_sampling()->set_max_tokens(max_tokens);
  r.mutable_sampling()->set_seed(seed);
  r.mutable_sampling()->set_ignore_eos(true);
  return r;
}

struct StreamResult {
  grpc::Status status;
  std::vector<v1::GenerateResponse> messages;
  std::vector<int32_t> tokens;
  std::string text;
};

inline StreamResult Stream(v1::Generation::Stub& stub, const v1::GenerateRequest& request) {
  StreamResult result;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 60s);
  auto reader = stub.GenerateStream(&context, request);
  v1::GenerateResponse message;
  while (reader->Read(&message)) {
    result.tokens.insert(result.tokens.end(), message.token_ids().begin(),
                         message.token_ids().end());
    result.text += message.text();
    result.messages.push_back(message);
  }
  result.status = reader->Finish();
  return result;
}

// `request` bytes to `method` through the generic stub: the status, and the answer's bytes.
inline std::pair<grpc::Status, std::string> RawUnaryCall(grpc::Channel* channel,
                                                         const std::string& method,
                                                         const std::string& request) {
  grpc::GenericStub generic(channel->shared_from_this());
  grpc::Slice slice(request);
  grpc::ByteBuffer request_buffer(&slice, 1);
  grpc::ByteBuffer response_buffer;
  grpc::ClientContext context;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  generic.UnaryCall(&context, method, grpc::StubOptions(), &request_buffer, &response_buffer,
                    [&](grpc::Status s) {
                      std::lock_guard<std::mutex> lock(mu);
                      status = std::move(s);
                      done = true;
                      cv.notify_all();
                    });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  std::string bytes;
  std::vector<grpc::Slice> slices;
  if (status.ok() && response_buffer.Dump(&slices).ok()) {
    for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return {status, bytes};
}

// grpc.health.v1.Health/Check: HealthCheckRequest is field 1 (service name), HealthCheckResponse
// is field 1 (status enum: 1 SERVING, 2 NOT_SERVING).
inline int HealthStatus(grpc::Channel* channel, const std::string& service) {
  std::string request;
  if (!service.empty()) {
    request.push_back(0x0a);
    request.push_back(static_cast<char>(service.size()));
    request += service;
  }
  const auto [status, bytes] = RawUnaryCall(channel, "/grpc.health.v1.Health/Check", request);
  if (!status.ok()) return -static_cast<int>(status.error_code());
  if (bytes.size() == 2 && bytes[0] == 0x08) return bytes[1];
  return bytes.empty() ? 0 : -100;
}

}  // namespace ridge::testing
