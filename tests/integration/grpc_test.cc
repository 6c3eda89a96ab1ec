// The gRPC server end to end: a real MesaNet test checkpoint, the engine and GrpcServer in this
// process on a loopback port, and the generated C++ stubs as the client over the network.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "models/mesanet_model.h"
#include "nlohmann/json.hpp"
#include "ridgeserve/v1/generation.grpc.pb.h"
#include "server/grpc_service.h"
#include "tests/integration/grpc_test_support.h"
#include "tests/support/run_command.h"
#include "tests/support/tiny_tokenizer.h"

namespace ridge {
namespace {

namespace v1 = ::ridgeserve::v1;
using namespace std::chrono_literals;
using testing::HealthStatus;
using testing::IdsRequest;
using testing::RawUnaryCall;
using testing::Stack;
using testing::Stream;
using testing::StreamResult;
using testing::WaitFor;

class GrpcServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EngineOptions options;
    options.max_slots = 4;
    options.max_waiting = 8;
    stack_ = Stack::Start(options, /*with_tokenizer=*/true).release();
    ASSERT_NE(stack_, nullptr);
  }
  static void TearDownTestSuite() {
    delete stack_;
    stack_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(stack_, nullptr); }

  v1::Generation::Stub& stub() { return *stack_->stub; }

  static Stack* stack_;
};
Stack* GrpcServerTest::stack_ = nullptr;

TEST_F(GrpcServerTest, UnaryGenerateFromTokenIds) {
  grpc::ClientContext context;
  v1::GenerateResponse response;
  v1::GenerateRequest request = IdsRequest({1, 17, 42}, 6, 7);
  request.mutable_solver()->set_tolerance(1e-3f);
  request.mutable_solver()->set_max_iterations(10);
  grpc::Status status = stub().Generate(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.token_ids_size(), 6);
  EXPECT_EQ(response.finish_reason(), v1::FINISH_REASON_LENGTH);
  const std::vector<int32_t> ids(response.token_ids().begin(), response.token_ids().end());
  for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < 512) << id;
  auto text = stack_->tokenizer->Decode(ids, true);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(response.text(), *text);
  const v1::Usage& usage = response.usage();
  EXPECT_EQ(usage.prompt_tokens(), 3);
  EXPECT_EQ(usage.completion_tokens(), 6);
  EXPECT_GT(usage.prefill().solves(), 0);
  EXPECT_GT(usage.decode().solves(), 0);
  EXPECT_LE(usage.decode().max_iterations(), 10);
  EXPECT_GE(usage.decode().capped_fraction(), 0.0);
  EXPECT_LE(usage.decode().capped_fraction(), 1.0);
  EXPECT_GE(usage.time_to_first_token_seconds(), usage.queue_time_seconds());
}

TEST_F(GrpcServerTest, StreamingMatchesUnaryForTheSameSeed) {
  const v1::GenerateRequest request = IdsRequest({3, 4, 5, 6}, 8, 1234);
  grpc::ClientContext context;
  v1::GenerateResponse unary;
  ASSERT_TRUE(stub().Generate(&context, request, &unary).ok());

  StreamResult streamed = Stream(stub(), request);
  ASSERT_TRUE(streamed.status.ok()) << streamed.status.error_message();
  ASSERT_FALSE(streamed.messages.empty());
  EXPECT_EQ(streamed.tokens,
            std::vector<int32_t>(unary.token_ids().begin(), unary.token_ids().end()));
  EXPECT_EQ(streamed.text, unary.text());
  for (size_t i = 0; i + 1 < streamed.messages.size(); ++i) {
    EXPECT_EQ(streamed.messages[i].finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
    EXPECT_FALSE(streamed.messages[i].has_usage());
  }
  const v1::GenerateResponse& last = streamed.messages.back();
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.usage().completion_tokens(), 8);

  // Same seed, same tokens, again; another seed (almost surely) differs.
  StreamResult again = Stream(stub(), request);
  EXPECT_EQ(again.tokens, streamed.tokens);
  v1::GenerateRequest other = request;
  other.mutable_sampling()->set_seed(99);
  StreamResult different = Stream(stub(), other);
  ASSERT_TRUE(different.status.ok());
  EXPECT_NE(different.tokens, streamed.tokens);
}

TEST_F(GrpcServerTest, TextPromptAndStopString) {
  v1::GenerateRequest request;
  request.set_text("Once upon a time");
  request.mutable_sampling()->set_max_tokens(24);
  request.mutable_sampling()->set_temperature(0.0f);  // greedy: deterministic
  request.mutable_sampling()->set_ignore_eos(true);
  StreamResult full = Stream(stub(), request);
  ASSERT_TRUE(full.status.ok()) << full.status.error_message();
  auto prompt_ids = stack_->tokenizer->Encode("Once upon a time", true);
  ASSERT_TRUE(prompt_ids.ok());
  EXPECT_EQ(full.messages.back().usage().prompt_tokens(), static_cast<int64_t>(prompt_ids->size()));
  ASSERT_GE(full.text.size(), 8u) << full.text;

  // A stop string taken from the middle of the greedy output: the text ends before its first
  // occurrence and the finish reason is STOP.
  size_t at = full.text.size() / 2;
  while (at > 0 && (static_cast<unsigned char>(full.text[at]) & 0xC0) == 0x80) --at;
  size_t end = at + 1;
  while (end < full.text.size() && (static_cast<unsigned char>(full.text[end]) & 0xC0) == 0x80) {
    ++end;
  }
  const std::string stop = full.text.substr(at, end - at);
  request.mutable_sampling()->add_stop(stop);
  StreamResult stopped = Stream(stub(), request);
  ASSERT_TRUE(stopped.status.ok()) << stopped.status.error_message();
  EXPECT_EQ(stopped.text, full.text.substr(0, full.text.find(stop)));
  EXPECT_EQ(stopped.messages.back().finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(stopped.messages.back().finish_message(), stop);
  EXPECT_TRUE(WaitFor([] { return stack_->Idle(); }));
}

// sampling.json_object: every output that ends on its own is one JSON object.
TEST_F(GrpcServerTest, JsonObjectModeWritesOneObject) {
  int objects = 0;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    v1::GenerateRequest request;
    request.set_text("A cat, in JSON:");
    request.mutable_sampling()->set_max_tokens(150);
    request.mutable_sampling()->set_seed(seed);
    request.mutable_sampling()->set_json_object(true);
    StreamResult result = Stream(stub(), request);
    ASSERT_TRUE(result.status.ok()) << result.status.error_message();
    const v1::FinishReason reason = result.messages.back().finish_reason();
    if (reason == v1::FINISH_REASON_LENGTH) continue;
    EXPECT_EQ(reason, v1::FINISH_REASON_EOS);
    EXPECT_TRUE(nlohmann::json::parse(result.text, nullptr, false).is_object()) << result.text;
    ++objects;
  }
  EXPECT_GE(objects, 2);
}

// sampling.json_schema: every output that ends on its own is an instance, its keys in the
// schema's order; a keyword not implemented is INVALID_ARGUMENT naming it. (The random model
// spends many tokens on whitespace between tokens, hence 400.)
TEST_F(GrpcServerTest, JsonSchemaModeWritesAnInstance) {
  int instances = 0;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    v1::GenerateRequest request;
    request.set_text("A point, in JSON:");
    request.mutable_sampling()->set_max_tokens(400);
    request.mutable_sampling()->set_seed(seed);
    request.mutable_sampling()->set_json_schema(R"({"type": "object",
        "properties": {"y": {"type": "integer"}, "x": {"type": ["number", "null"]},
                       "label": {"enum": ["a", "b"]}},
        "required": ["y", "x", "label"], "additionalProperties": false})");
    StreamResult result = Stream(stub(), request);
    ASSERT_TRUE(result.status.ok()) << result.status.error_message();
    const v1::FinishReason reason = result.messages.back().finish_reason();
    if (reason == v1::FINISH_REASON_LENGTH) continue;
    EXPECT_EQ(reason, v1::FINISH_REASON_EOS);
    const auto v = nlohmann::ordered_json::parse(result.text, nullptr, false);
    ASSERT_TRUE(v.is_object()) << result.text;
    ASSERT_EQ(v.size(), 3u) << result.text;
    EXPECT_EQ(v.begin().key(), "y") << result.text;
    EXPECT_TRUE(v.at("y").is_number_integer()) << result.text;
    EXPECT_TRUE(v.at("x").is_number() || v.at("x").is_null()) << result.text;
    EXPECT_TRUE(v.at("label") == "a" || v.at("label") == "b") << result.text;
    ++instances;
  }
  EXPECT_GE(instances, 2);
  v1::GenerateRequest refused;
  refused.set_text("x");
  refused.mutable_sampling()->set_json_schema(R"({"type": "object", "minProperties": 1})");
  StreamResult result = Stream(stub(), refused);
  EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(result.status.error_message().find("keyword \"minProperties\""), std::string::npos)
      << result.status.error_message();
}

TEST_F(GrpcServerTest, ClientCancellationFreesTheSlot) {
  grpc::ClientContext context;
  auto reader = stub().GenerateStream(&context, IdsRequest({1, 2, 3}, 50000, 5));
  v1::GenerateResponse message;
  int tokens = 0;
  while (tokens < 3 && reader->Read(&message)) tokens += message.token_ids_size();
  ASSERT_GE(tokens, 3);
  EXPECT_GE(stack_->engine->Snapshot().slots_used, 1);
  context.TryCancel();
  while (reader->Read(&message)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitFor([] { return stack_->Idle(); }))
      << "slots_used " << stack_->engine->Snapshot().slots_used;
}

TEST_F(GrpcServerTest, DeadlineEndsTheRequest) {
  for (bool streaming : {true, false}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 300ms);
    const v1::GenerateRequest request = IdsRequest({1, 2, 3}, 50000, 5);
    grpc::Status status;
    if (streaming) {
      auto reader = stub().GenerateStream(&context, request);
      v1::GenerateResponse message;
      while (reader->Read(&message)) {
        if (message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
          EXPECT_EQ(message.finish_reason(), v1::FINISH_REASON_CANCELLED);
        }
      }
      status = reader->Finish();
    } else {
      v1::GenerateResponse response;
      status = stub().Generate(&context, request, &response);
    }
    EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << streaming << " " << status.error_message();
    EXPECT_TRUE(WaitFor([] { return stack_->Idle(); }));
  }
}

TEST_F(GrpcServerTest, InvalidRequestsNameTheField) {
  v1::GenerateRequest request = IdsRequest({1, 2}, 4, 1);
  request.mutable_sampling()->set_top_p(1.5f);
  grpc::ClientContext context;
  v1::GenerateResponse response;
  grpc::Status status = stub().Generate(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("top_p"), std::string::npos) << status.error_message();

  request = IdsRequest({1, 600}, 4, 1);
  StreamResult streamed = Stream(stub(), request);
  EXPECT_EQ(streamed.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(streamed.status.error_message().find("token_ids.ids[1] = 600"), std::string::npos)
      << streamed.status.error_message();
  EXPECT_TRUE(streamed.messages.empty());
}

TEST_F(GrpcServerTest, TokenizeDetokenizeAndModelInfo) {
  grpc::ClientContext c1;
  v1::TokenizeRequest tokenize;
  tokenize.set_text("héllo wörld");
  v1::TokenizeResponse tokens;
  ASSERT_TRUE(stub().Tokenize(&c1, tokenize, &tokens).ok());
  ASSERT_GT(tokens.token_ids_size(), 0);

  grpc::ClientContext c2;
  v1::DetokenizeRequest detokenize;
  *detokenize.mutable_token_ids() = tokens.token_ids();
  v1::DetokenizeResponse text;
  ASSERT_TRUE(stub().Detokenize(&c2, detokenize, &text).ok());
  EXPECT_EQ(text.text(), "héllo wörld");

  grpc::ClientContext c3;
  v1::ModelInfo info;
  ASSERT_TRUE(stub().GetModelInfo(&c3, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.name(), "d64_untied");
  EXPECT_EQ(info.architecture(), "mesa_net");
  EXPECT_EQ(info.vocab_size(), 512);
  EXPECT_EQ(info.hidden_size(), 128);
  EXPECT_EQ(info.num_layers(), 2);
  EXPECT_EQ(info.num_heads(), 2);
  EXPECT_EQ(info.head_dim(), 64);
  EXPECT_GT(info.parameter_count(), 0);
  EXPECT_GT(info.state_bytes(), 0);
  EXPECT_EQ(info.eos_token_id(), 2);
  EXPECT_TRUE(info.has_tokenizer());
  EXPECT_EQ(info.max_slots(), 4);
  EXPECT_EQ(info.max_waiting(), 8);
  EXPECT_EQ(info.default_solver().max_iterations(),
            stack_->engine->options().default_solver.max_iterations);
}

// With API keys: every Generation method needs `authorization: Bearer <key>`; health does not.
TEST(GrpcApiKeysTest, MethodsNeedAKeyHealthDoesNot) {
  auto keys = ApiKeys::Load("grpc-key-12345", "");
  ASSERT_TRUE(keys.ok()) << keys.status();
  auto stack = Stack::Start(EngineOptions{.max_slots = 2}, /*with_tokenizer=*/true, *keys);
  ASSERT_NE(stack, nullptr);
  for (const char* header : {"", "Bearer wrong-key-000"}) {
    grpc::ClientContext context;
    if (*header != '\0') context.AddMetadata("authorization", header);
    v1::GenerateResponse response;
    EXPECT_EQ(stack->stub->Generate(&context, IdsRequest({1, 2}, 2, 1), &response).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  grpc::ClientContext info_context;
  v1::ModelInfo info;
  EXPECT_EQ(stack->stub->GetModelInfo(&info_context, {}, &info).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext stream_context;
  auto reader = stack->stub->GenerateStream(&stream_context, IdsRequest({1, 2}, 2, 1));
  v1::GenerateResponse message;
  while (reader->Read(&message)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);

  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer grpc-key-12345");
  v1::GenerateResponse response;
  const grpc::Status ok = stack->stub->Generate(&context, IdsRequest({1, 2}, 2, 1), &response);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(HealthStatus(stack->channel.get(), ""), 1);
}

TEST_F(GrpcServerTest, HealthCheck) {
  grpc::Channel* channel = stack_->channel.get();
  EXPECT_EQ(HealthStatus(channel, ""), 1);
  EXPECT_EQ(HealthStatus(channel, "ridgeserve.v1.Generation"), 1);
  stack_->server->SetServing(false);
  EXPECT_EQ(HealthStatus(channel, ""), 2);
  EXPECT_EQ(HealthStatus(channel, "ridgeserve.v1.Generation"), 2);
  stack_->server->SetServing(true);
  EXPECT_EQ(HealthStatus(channel, ""), 1);
  // An unknown service is NOT_FOUND.
  EXPECT_EQ(HealthStatus(channel, "no.such.Service"), -static_cast<int>(grpc::NOT_FOUND));
}

// Bytes that are no GenerateRequest (a truncated field, a wrong wire type, a string that is not
// UTF-8) get INVALID_ARGUMENT saying so, from every method, streaming or not.
TEST_F(GrpcServerTest, BytesThatDoNotParseAreInvalidArgumentWithAMessage) {
  const std::string bad[] = {
      std::string{'\x0a', '\x05', 'a', 'b'},        // field 1 (prompt) declares 5 bytes, has 2
      std::string{'\x0f', '\x01'},                  // field 1 with wire type 7 (none exists)
      std::string{'\x0a', '\x02', '\xff', '\xfe'},  // prompt text that is not UTF-8
  };

  for (const char* method :
       {"/ridgeserve.v1.Generation/Generate", "/ridgeserve.v1.Generation/GenerateStream",
        "/ridgeserve.v1.Generation/Tokenize"}) {
    for (const std::string& bytes : bad) {
      const auto [status, answer] = RawUnaryCall(stack_->channel.get(), method, bytes);
      EXPECT_EQ(status.error_code(), grpc::INVALID_ARGUMENT)
          << method << ": " << status.error_message();
      EXPECT_NE(status.error_message().find("not a valid"), std::string::npos)
          << method << ": " << status.error_message();
    }
  }
  // The server goes on serving.
  v1::TokenizeRequest request;
  request.set_text("hello");
  v1::TokenizeResponse response;
  grpc::ClientContext context;
  EXPECT_TRUE(stub().Tokenize(&context, request, &response).ok());
}

using testing::RunCommand;

TEST_F(GrpcServerTest, ExampleClient) {
  const std::string client =
      absl::StrCat(RIDGE_GRPC_CLIENT, " --address 127.0.0.1:", stack_->server->port());
  auto [rc, out] = RunCommand(client + " --prompt-ids 1,2,3 --max-tokens 5 --seed 1 --stream");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("finish: length"), std::string::npos) << out;
  EXPECT_NE(out.find("usage: 3 prompt (0 cached) + 5 completion tokens"), std::string::npos) << out;
  EXPECT_NE(out.find("decode solver: "), std::string::npos) << out;

  std::tie(rc, out) = RunCommand(client + " --prompt 'Hello' --max-tokens 3 --temperature 0");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("+ 3 completion tokens"), std::string::npos) << out;

  std::tie(rc, out) = RunCommand(client + " --info");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("vocab_size: 512"), std::string::npos) << out;

  std::tie(rc, out) = RunCommand(client + " --prompt-ids 1,2 --top-p 7");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("top_p"), std::string::npos) << out;

  // Log-probabilities: the prompt's tokens after the first with ranks and alternatives, then
  // each generated token's with its alternatives, streamed or not.
  for (const char* mode : {"", " --stream"}) {
    std::tie(rc, out) =
        RunCommand(client + " --prompt-ids 5,6,7 --max-tokens 2 --temperature 0 --ignore-eos" +
                   " --logprobs --top-logprobs 2 --prompt-logprobs 1" + mode);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("prompt logprobs"), std::string::npos) << out;
    EXPECT_NE(out.find("prompt token 1: id 6 logprob "), std::string::npos) << out;
    EXPECT_NE(out.find("prompt token 2: id 7 logprob "), std::string::npos) << out;
    EXPECT_EQ(out.find("prompt token 3:"), std::string::npos) << out;
    EXPECT_NE(out.find(" rank "), std::string::npos) << out;
    EXPECT_NE(out.find("token 1: id "), std::string::npos) << out;
    EXPECT_EQ(out.find("token 2: id "), out.find("prompt token 2: id ") + 7) << out;
  }
  std::tie(rc, out) = RunCommand(client + " --prompt-ids 1,2 --prompt-logprobs 21");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("prompt_logprobs"), std::string::npos) << out;
}

TEST_F(GrpcServerTest, ServerReflectionListsTheService) {
  // ServerReflectionRequest{list_services: ""} (field 7) over the generic async stub.
  grpc::GenericStub generic(stack_->channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 20s);
  grpc::CompletionQueue cq;
  auto call = generic.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  auto step = [&](intptr_t expected) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), expected);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(step(1));
  const std::string request("\x3a\x00", 2);
  grpc::Slice slice(request);
  grpc::ByteBuffer request_buffer(&slice, 1);
  call->Write(request_buffer, reinterpret_cast<void*>(2));
  ASSERT_TRUE(step(2));
  call->WritesDone(reinterpret_cast<void*>(3));
  ASSERT_TRUE(step(3));
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(4));
  ASSERT_TRUE(step(4));
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(5);
  EXPECT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_NE(bytes.find("ridgeserve.v1.Generation"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
}

TEST_F(GrpcServerTest, StartFailsOnATakenPortOrABadAddress) {
  for (const std::string& address :
       {absl::StrCat("127.0.0.1:", stack_->server->port()), std::string("not an address")}) {
    auto server = GrpcServer::Start(stack_->engine.get(), nullptr,
                                    GrpcServerOptions{.address = address, .model_name = "x"});
    ASSERT_FALSE(server.ok()) << address;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(server.status().message().find(address), absl::string_view::npos) << server.status();
  }
}

}  // namespace
}  // namespace ridge
