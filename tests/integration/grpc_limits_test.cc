// The gRPC server at its limits: a full queue, requests without a tokenizer, and draining.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "tests/integration/grpc_test_support.h"

namespace ridge {
namespace {

namespace v1 = ::ridgeserve::v1;
using namespace std::chrono_literals;
using testing::HealthStatus;
using testing::IdsRequest;
using testing::Stack;
using testing::WaitFor;

// A server of one slot and a queue of one, without a tokenizer.
TEST(GrpcServerLimitsTest, QueueFullIsResourceExhausted) {
  EngineOptions options;
  options.max_slots = 1;
  options.max_waiting = 1;
  std::unique_ptr<Stack> stack = Stack::Start(options, /*with_tokenizer=*/false);
  ASSERT_NE(stack, nullptr);

  grpc::ClientContext running_context;
  auto running = stack->stub->GenerateStream(&running_context, IdsRequest({1, 2}, 50000, 1));
  v1::GenerateResponse message;
  ASSERT_TRUE(running->Read(&message));  // it holds the slot
  EXPECT_TRUE(message.text().empty());   // no tokenizer, no text
  grpc::ClientContext waiting_context;
  auto waiting = stack->stub->GenerateStream(&waiting_context, IdsRequest({1, 2}, 50000, 2));
  ASSERT_TRUE(WaitFor([&] { return stack->engine->Snapshot().waiting == 1; }));

  grpc::ClientContext context;
  v1::GenerateResponse response;
  grpc::Status status = stack->stub->Generate(&context, IdsRequest({1, 2}, 4, 3), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(status.error_message().find("queue is full"), std::string::npos)
      << status.error_message();

  // Without a tokenizer, text features are FAILED_PRECONDITION.
  grpc::ClientContext text_context;
  v1::GenerateRequest text_request;
  text_request.set_text("hello");
  status = stack->stub->Generate(&text_context, text_request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  grpc::ClientContext tokenize_context;
  v1::TokenizeResponse tokens;
  status = stack->stub->Tokenize(&tokenize_context, v1::TokenizeRequest(), &tokens);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  running_context.TryCancel();
  waiting_context.TryCancel();
  while (running->Read(&message)) {
  }
  while (waiting->Read(&message)) {
  }
  EXPECT_EQ(running->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(waiting->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitFor([&] { return stack->Idle(); }));
}

// Draining: NOT_SERVING, the engine refuses new work (UNAVAILABLE), a running stream completes.
TEST(GrpcServerLimitsTest, DrainFinishesRunningStreams) {
  std::unique_ptr<Stack> stack = Stack::Start(EngineOptions(), /*with_tokenizer=*/false);
  ASSERT_NE(stack, nullptr);
  grpc::ClientContext context;
  auto reader = stack->stub->GenerateStream(&context, IdsRequest({1, 2}, 40, 1));
  v1::GenerateResponse message;
  ASSERT_TRUE(reader->Read(&message));

  stack->server->SetServing(false);
  stack->engine->StartDrain();
  grpc::ClientContext refused_context;
  v1::GenerateResponse refused;
  grpc::Status status = stack->stub->Generate(&refused_context, IdsRequest({1}, 2, 1), &refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(HealthStatus(stack->channel.get(), ""), 2);

  int tokens = message.token_ids_size();
  v1::FinishReason finish = message.finish_reason();
  while (reader->Read(&message)) {
    tokens += message.token_ids_size();
    finish = message.finish_reason();
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(tokens, 40);
  EXPECT_EQ(finish, v1::FINISH_REASON_LENGTH);
  EXPECT_TRUE(stack->engine->WaitIdle(std::chrono::steady_clock::now() + 10s));
  stack->server->Shutdown(std::chrono::steady_clock::now() + 2s);
}

}  // namespace
}  // namespace ridge
