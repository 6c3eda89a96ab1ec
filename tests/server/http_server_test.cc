// The HTTP layer in-process, against a scripted fake engine: routes, OpenAI shapes, SSE,
// stop strings, error codes, cancellation on disconnect, draining.
#include "server/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "server/api_error.h"
#include "tests/server/fake_backend.h"
#include "tests/server/http_test_client.h"
#include "tests/server/running_http_server.h"
#include "tests/server/tiny_tokenizer.h"

namespace ridge {
namespace {

using nlohmann::json;
using testing::FakeBackend;
using testing::PostJson;
using testing::PostStream;
using testing::StreamText;

class HttpServerTest : public ::testing::Test {
 protected:
  // Options a test may change before Start (SetUp starts with the defaults).
  virtual void Configure(HttpServerOptions&) {}
  void SetUp() override {
    tokenizer_ = *Tokenizer::FromJson(testing::TinyTokenizerJson().dump(),
                                      testing::TinyTokenizerConfigJson().dump());
    auto chat =
        ChatTemplate::FromSource("default", tokenizer_->config().chat_templates.at(0).source);
    ASSERT_TRUE(chat.ok()) << chat.status();
    chat_ = std::make_unique<ChatTemplate>(*chat);
    HttpServerOptions options;
    options.model_id = "tiny";
    options.limits.vocab_size = 512;
    options.limits.max_new_tokens = 1000;
    options.max_prompt_tokens = 100;
    options.connections.worker_threads = 16;
    Configure(options);
    options_ = options;
    running_ = testing::RunningHttpServer::Start(&backend_, tokenizer_.get(), chat_.get(),
                                                 &metrics_, options);
    ASSERT_NE(running_, nullptr);
    client_ = running_->Client();
  }
  void TearDown() override { running_.reset(); }

  FakeBackend backend_;
  HttpServerOptions options_;  // what SetUp started the server with
  PrometheusMetrics metrics_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> chat_;
  std::unique_ptr<testing::RunningHttpServer> running_;
  std::unique_ptr<httplib::Client> client_;
};

// A backend that can no longer step turns both probes to 503, naming why.
TEST_F(HttpServerTest, ABrokenBackendFailsTheProbes) {
  backend_.SetBackendFailure("the model backend can no longer run (rank 1: aborted)");
  for (const char* probe : {"/health", "/ready"}) {
    auto reply = client_->Get(probe);
    ASSERT_TRUE(reply) << probe;
    EXPECT_EQ(reply->status, 503) << probe;
    EXPECT_NE(reply->body.find("rank 1: aborted"), std::string::npos) << reply->body;
  }
}

TEST_F(HttpServerTest, HealthReadyModels) {
  EXPECT_EQ(client_->Get("/health")->status, 200);
  EXPECT_EQ(client_->Get("/ready")->status, 200);
  auto models = client_->Get("/v1/models");
  ASSERT_TRUE(models);
  const json body = json::parse(models->body);
  EXPECT_EQ(body["object"], "list");
  EXPECT_EQ(body["data"][0]["id"], "tiny");
  EXPECT_EQ(client_->Get("/nope")->status, 404);
}

TEST_F(HttpServerTest, UnaryCompletion) {
  const auto r = PostJson(*client_, "/v1/completions",
                          {{"model", "tiny"}, {"prompt", "Hi"}, {"max_tokens", 5}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body["object"], "text_completion");
  EXPECT_EQ(r.body["model"], "tiny");
  EXPECT_EQ(r.body["choices"][0]["text"], "Hello");
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 5);
  EXPECT_EQ(r.body["usage"]["total_tokens"], 7);
  EXPECT_EQ(r.body["usage"]["solver"]["decode"]["solves"], 1);
  EXPECT_EQ(backend_.last_request.prompt,
            (std::vector<int32_t>{testing::TinyTokenId('H'), testing::TinyTokenId('i')}));
}

TEST_F(HttpServerTest, StreamingCompletionWithUsage) {
  const auto r = PostStream(*client_, "/v1/completions",
                            {{"prompt", {1, 2, 3}},
                             {"max_tokens", 11},
                             {"stream", true},
                             {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_TRUE(r.done);
  EXPECT_EQ(StreamText(r), "Hello world");
  ASSERT_GE(r.chunks.size(), 3u);
  const json& last_choice = r.chunks[r.chunks.size() - 2];
  EXPECT_EQ(last_choice["choices"][0]["finish_reason"], "length");
  const json& usage = r.chunks.back();
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 11);
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 3);
  for (size_t i = 0; i + 1 < r.chunks.size(); ++i) {
    EXPECT_TRUE(r.chunks[i]["usage"].is_null()) << r.chunks[i];
    EXPECT_EQ(r.chunks[i]["id"], r.chunks[0]["id"]);
  }
  EXPECT_TRUE(r.raw.ends_with("data: [DONE]\n\n"));
}

TEST_F(HttpServerTest, StopStringSplitAcrossTokensTruncatesAndCancels) {
  const auto r = PostJson(*client_, "/v1/completions",
                          {{"prompt", "x"}, {"max_tokens", 40}, {"stop", {"o w", "zzz"}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body["choices"][0]["text"], "Hell");
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 7);  // "Hello w" consumed
  EXPECT_GE(backend_.cancels.load(), 1);
  // The engine is told why, so its metrics count a stop, not a cancellation.
  EXPECT_EQ(backend_.stop_string_cancels.load(), backend_.cancels.load());

  const auto s =
      PostStream(*client_, "/v1/completions",
                 {{"prompt", "x"}, {"max_tokens", 40}, {"stop", "world"}, {"stream", true}});
  EXPECT_EQ(StreamText(s), "Hello ");
  EXPECT_EQ(s.chunks.back()["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(s.done);
}

TEST_F(HttpServerTest, ChatUnaryAndStreaming) {
  const json messages = json::array({{{"role", "user"}, {"content", "Hi"}}});
  const auto r =
      PostJson(*client_, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", 5}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body["object"], "chat.completion");
  EXPECT_EQ(r.body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r.body["choices"][0]["message"]["content"], "Hello");
  // The ChatML template renders the default system prompt, the user turn and the assistant cue.
  const std::string expected_prompt =
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi"
      "<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(*tokenizer_->Decode(backend_.last_request.prompt, false), expected_prompt);

  const auto s = PostStream(*client_, "/v1/chat/completions",
                            {{"messages", messages}, {"max_tokens", 5}, {"stream", true}});
  ASSERT_EQ(s.status, 200);
  EXPECT_EQ(s.chunks.front()["object"], "chat.completion.chunk");
  EXPECT_EQ(s.chunks.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(StreamText(s), "Hello");
  EXPECT_EQ(s.chunks.back()["choices"][0]["finish_reason"], "length");
}

TEST_F(HttpServerTest, LogprobsAndSolverBudgetReachTheEngine) {
  const auto r = PostJson(*client_, "/v1/chat/completions",
                          {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                           {"max_tokens", 2},
                           {"logprobs", true},
                           {"top_logprobs", 1},
                           {"solver_tolerance", 0.01},
                           {"timeout", 30}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(backend_.last_request.logprobs);
  EXPECT_EQ(backend_.last_request.top_logprobs, 1);
  ASSERT_TRUE(backend_.last_request.solver.has_value());
  EXPECT_FLOAT_EQ(backend_.last_request.solver->tolerance, 0.01f);
  EXPECT_EQ(backend_.last_request.solver->max_iterations, 30);  // the server default
  EXPECT_TRUE(backend_.last_request.deadline.has_value());
  const json& content = r.body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "H");
  EXPECT_EQ(content[0]["logprob"], -0.5);
}

TEST_F(HttpServerTest, ErrorsHaveOpenAiBodiesAndCodes) {
  auto r = PostJson(*client_, "/v1/completions", {{"prompt", "x"}, {"temperature", 9}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "temperature");
  EXPECT_EQ(r.body["error"]["type"], "invalid_request_error");

  auto bad_json = client_->Post("/v1/completions", "{nope", "application/json");
  EXPECT_EQ(bad_json->status, 400);
  auto overflow = client_->Post("/v1/completions", R"({"prompt": "x", "temperature": 1e400})",
                                "application/json");
  EXPECT_EQ(overflow->status, 400);
  EXPECT_NE(overflow->body.find("out of range"), std::string::npos) << overflow->body;

  // A route under another method: 405 with Allow; an unknown route: 404 not_found.
  auto get = client_->Get("/v1/completions");
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(get->get_header_value("Allow"), "POST");
  EXPECT_EQ(json::parse(get->body)["error"]["type"], "invalid_request_error");
  EXPECT_EQ(json::parse(get->body)["error"]["code"], "method_not_allowed");
  auto post = client_->Post("/health", "", "application/json");
  EXPECT_EQ(post->status, 405);
  auto missing = client_->Get("/v2/nothing");
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(json::parse(missing->body)["error"]["code"], "not_found");

  r = PostJson(*client_, "/v1/completions", {{"prompt", "x"}, {"model", "gpt-4"}});
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body["error"]["param"], "model");
  EXPECT_EQ(r.body["error"]["code"], "model_not_found");

  r = PostJson(*client_, "/v1/completions", {{"prompt", std::string(101, 'a')}});
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.body["error"]["param"], "prompt");

  backend_.reject = absl::ResourceExhaustedError("the queue is full");
  r = PostJson(*client_, "/v1/completions", {{"prompt", "x"}, {"stream", true}});
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.body["error"]["message"], "the queue is full");

  backend_.reject = absl::InvalidArgumentError("max_tokens: 900 is more than the limit of 800");
  r = PostJson(*client_, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 900}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "max_tokens");
  backend_.reject = absl::OkStatus();

  const std::string metrics = client_->Get("/metrics")->body;
  EXPECT_NE(metrics.find("ridgeserve_requests_total{status=\"invalid_argument\"}"),
            std::string::npos);
}

TEST_F(HttpServerTest, ClientDisconnectCancelsTheRequest) {
  backend_.interval = std::chrono::milliseconds(5);
  int seen = 0;
  const auto r = PostStream(*client_, "/v1/completions",
                            {{"prompt", "x"}, {"max_tokens", 1000}, {"stream", true}},
                            [&](const json&) { return ++seen < 3; });
  EXPECT_TRUE(r.aborted);
  client_->stop();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (backend_.cancels.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(backend_.cancels.load(), 1);
  while (backend_.Snapshot().running > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(backend_.Snapshot().running, 0);
}

// The server stops while the backend is sending a stream's tokens as fast as it can: each event
// wakes the connection through a reference to it taken for the moment, so the answer may be
// destroyed on the backend's thread, after the server. It must not reach into the destroyed
// server then (the guard of the active requests was a pointer into it: ThreadSanitizer and
// AddressSanitizer caught it at times; this test makes that likely).
TEST_F(HttpServerTest, AnAnswerMayOutliveTheServer) {
  backend_.interval = std::chrono::milliseconds(0);
  options_.limits.max_new_tokens = 10'000'000;
  for (int round = 0; round < 20; ++round) {
    running_ = testing::RunningHttpServer::Start(&backend_, tokenizer_.get(), chat_.get(),
                                                 &metrics_, options_);
    ASSERT_NE(running_, nullptr);
    std::thread client([port = running_->port()] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(10, 0);
      PostStream(c, "/v1/completions",
                 {{"prompt", {1}}, {"max_tokens", 10'000'000}, {"stream", true}});
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (backend_.Snapshot().running == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const int64_t started = backend_.Snapshot().running;
    running_.reset();  // cancels the request while its tokens keep coming
    client.join();
    ASSERT_EQ(started, 1);
    while (backend_.Snapshot().running > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(backend_.Snapshot().running, 0);
  }
}

TEST_F(HttpServerTest, DrainingRefusesNewRequestsAndReadyTurns503) {
  running_->server().StartDrain();
  EXPECT_EQ(client_->Get("/ready")->status, 503);
  EXPECT_EQ(client_->Get("/health")->status, 200);
  const auto r = PostJson(*client_, "/v1/completions", {{"prompt", "x"}});
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body["error"]["code"], "unavailable");
}

}  // namespace
}  // namespace ridge

namespace ridge {
namespace {

TEST(HttpServerWithoutTokenizerTest, AcceptsTokenIdsOnlyAndReturnsThem) {
  FakeBackend backend;
  HttpServerOptions options;
  options.model_id = "ids-only";
  options.limits.vocab_size = 512;
  HttpServer server(&backend, nullptr, nullptr, nullptr, options);
  const int port = *server.Bind("127.0.0.1", 0);
  std::thread thread([&] { server.Run(); });
  server.SetReady(true);
  httplib::Client client("127.0.0.1", port);

  auto r = PostJson(client, "/v1/completions", {{"prompt", "text"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "prompt");
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("--tokenizer"), std::string::npos);
  r = PostJson(client, "/v1/chat/completions",
               {{"messages", {{{"role", "user"}, {"content", "x"}}}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "messages");

  r = PostJson(client, "/v1/completions", {{"prompt", {5, 6}}, {"max_tokens", 3}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body["choices"][0]["text"], "");
  EXPECT_EQ(
      r.body["choices"][0]["token_ids"],
      (json{testing::TinyTokenId('H'), testing::TinyTokenId('e'), testing::TinyTokenId('l')}));
  const auto s =
      PostStream(client, "/v1/completions", {{"prompt", {5}}, {"max_tokens", 2}, {"stream", true}});
  ASSERT_EQ(s.chunks.size(), 3u) << s.raw;  // one chunk per token, then the finish chunk
  EXPECT_EQ(s.chunks[0]["choices"][0]["token_ids"], (json{testing::TinyTokenId('H')}));
  EXPECT_EQ(client.Get("/metrics")->status, 404);  // no metrics object given
  server.Stop();
  thread.join();
}

}  // namespace
}  // namespace ridge

namespace ridge {
namespace {

TEST(HttpServerBindTest, ATakenPortIsAnErrorNotASharedPort) {
  FakeBackend backend;
  HttpServerOptions options;
  options.limits.vocab_size = 512;
  HttpServer first(&backend, nullptr, nullptr, nullptr, options);
  const auto port = first.Bind("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  HttpServer second(&backend, nullptr, nullptr, nullptr, options);
  const auto again = second.Bind("127.0.0.1", *port);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable);
}

class HttpServerKeysTest : public HttpServerTest {
 protected:
  void Configure(HttpServerOptions& options) override {
    auto keys = ApiKeys::Load("key-one-12345", "");
    ASSERT_TRUE(keys.ok()) << keys.status();
    options.api_keys = *keys;
  }
};

TEST_F(HttpServerKeysTest, GenerationAndMetricsNeedAKeyProbesDoNot) {
  auto r = PostJson(*client_, "/v1/completions", {{"prompt", "x"}});
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.body["error"]["code"], "invalid_api_key");
  EXPECT_EQ(client_->Get("/metrics")->status, 401);
  EXPECT_EQ(client_->Get("/v1/models")->status, 401);
  EXPECT_EQ(client_->Get("/health")->status, 200);
  EXPECT_EQ(client_->Get("/ready")->status, 200);

  client_->set_bearer_token_auth("wrong-key-000");
  EXPECT_EQ(PostJson(*client_, "/v1/completions", {{"prompt", "x"}}).status, 401);
  client_->set_bearer_token_auth("key-one-12345");
  EXPECT_EQ(PostJson(*client_, "/v1/completions", {{"prompt", "x"}}).status, 200);
  EXPECT_EQ(client_->Get("/metrics")->status, 200);
  EXPECT_EQ(client_->Get("/v1/models")->status, 200);
}

TEST(ApiKeysTest, LoadsKeysAndRefusesBadOnes) {
  const auto dir = std::filesystem::temp_directory_path() / "ridge_api_keys_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "keys") << "# team keys\n\nalpha-12345678\n  beta-12345678  \n";
  auto keys = ApiKeys::Load("gamma-12345678", (dir / "keys").string());
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->size(), 3u);
  EXPECT_TRUE(keys->Accepts("Bearer beta-12345678"));
  EXPECT_TRUE(keys->Accepts("bearer gamma-12345678"));
  EXPECT_FALSE(keys->Accepts("Bearer beta-1234567"));    // a prefix
  EXPECT_FALSE(keys->Accepts("Bearer beta-123456789"));  // longer
  EXPECT_FALSE(keys->Accepts("beta-12345678"));          // no scheme
  EXPECT_FALSE(keys->Accepts(""));
  EXPECT_TRUE(ApiKeys::Load("", "")->Accepts(""));  // no keys: open

  std::ofstream(dir / "empty") << "# nothing\n";
  EXPECT_FALSE(ApiKeys::Load("", (dir / "empty").string()).ok());
  EXPECT_EQ(ApiKeys::Load("", (dir / "missing").string()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(ApiKeys::Load("short", "").ok());
  EXPECT_FALSE(ApiKeys::Load("has space inside", "").ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ridge
