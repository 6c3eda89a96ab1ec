// The real `ridgeserve serve` binary on a loopback port, a test checkpoint and a tiny byte-level
// tokenizer, driven by an HTTP client: unary and streaming generation, determinism, 32
// concurrent streams during a long prefill, cancellation, deadlines, queue-full, invalid fields,
// /metrics (and promtool), and draining on SIGTERM.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <thread>

#include "tests/integration/http_choices.h"
#include "tests/integration/server_process.h"
#include "tests/server/documented_metrics.h"
#include "tests/server/http_test_client.h"
#include "tests/server/tiny_tokenizer.h"
#include "tests/support/run_command.h"

namespace ridge {
namespace {

using nlohmann::json;
using testing::PostJson;
using testing::PostStream;
using testing::ServerProcess;
using testing::StreamText;

const std::filesystem::path kModel =
    std::filesystem::path(RIDGE_TEST_DATA_DIR) / "mesanet" / "d64_untied";

std::filesystem::path TempDir() {
  static const std::filesystem::path dir = [] {
    auto d =
        std::filesystem::temp_directory_path() / ("ridge_http_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    testing::WriteTinyTokenizer(d / "tokenizer");
    return d;
  }();
  return dir;
}

// A model folder with kModel's config.json and nothing else: no weights.
std::filesystem::path ConfigOnlyModel() {
  static const std::filesystem::path dir = [] {
    const auto d = TempDir() / "config_only";
    std::filesystem::create_directories(d);
    std::filesystem::copy_file(kModel / "config.json", d / "config.json",
                               std::filesystem::copy_options::overwrite_existing);
    return d;
  }();
  return dir;
}

// A chat template using a filter that does not exist.
std::filesystem::path BadTemplate() {
  const auto path = TempDir() / "bad.jinja";
  std::ofstream(path) << "Hi\n{% for m in messages %}{{ m | explode }}{% endfor %}";
  return path;
}

std::unique_ptr<ServerProcess> StartServer(const std::vector<std::string>& extra,
                                           const std::string& name,
                                           const std::filesystem::path& model = kModel) {
  std::vector<std::string> args = {
      "--model", model.string(), "--tokenizer", (TempDir() / "tokenizer").string(), "--threads",
      "1",       "--log-level",  "info"};
  args.insert(args.end(), extra.begin(), extra.end());
  signal(SIGPIPE, SIG_IGN);  // a write to a server that went away must fail, not kill the test
  std::string error;
  auto server = ServerProcess::Start(RIDGESERVE_BINARY, args, TempDir() / (name + ".log"), &error);
  EXPECT_NE(server, nullptr) << error;
  return server;
}

std::unique_ptr<httplib::Client> Client(const ServerProcess& server) {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", server.port());
  client->set_read_timeout(30, 0);
  return client;
}

// The value of an unlabelled sample (or one with exactly these labels) in a /metrics text.
double MetricValue(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

std::string Metrics(httplib::Client& client) {
  auto r = client.Get("/metrics");
  return r ? r->body : std::string();
}

// Polls /metrics until `series` has `value`, up to `timeout`.
bool WaitForMetric(httplib::Client& client, const std::string& series, double value,
                   std::chrono::seconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (MetricValue(Metrics(client), series) == value) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::vector<int> Ids(const json& choice) { return choice["token_ids"].get<std::vector<int>>(); }

class HttpIntegrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = StartServer({"--slots", "48", "--max-waiting", "64", "--prefill-token-budget", "256",
                           "--max-prompt-tokens", "4096"},
                          "shared")
                  .release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    client_ = Client(*server_);
  }

  static ServerProcess* server_;
  std::unique_ptr<httplib::Client> client_;
};

ServerProcess* HttpIntegrationTest::server_ = nullptr;

TEST_F(HttpIntegrationTest, UnaryAndStreamingAgreeForTheSameSeed) {
  const json body = {{"prompt", "Hello"}, {"max_tokens", 12},   {"temperature", 1.0},
                     {"seed", 1234},      {"ignore_eos", true}, {"return_token_ids", true}};
  const auto unary = PostJson(*client_, "/v1/completions", body);
  ASSERT_EQ(unary.status, 200) << unary.body;
  const json& choice = unary.body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(Ids(choice).size(), 12u);
  EXPECT_EQ(unary.body["usage"]["completion_tokens"], 12);
  EXPECT_EQ(unary.body["usage"]["prompt_tokens"], 5);
  EXPECT_GT(unary.body["usage"]["solver"]["decode"]["solves"].get<int>(), 0);
  EXPECT_GT(unary.body["usage"]["solver"]["prefill"]["mean_iterations"].get<double>(), 0);

  const auto again = PostJson(*client_, "/v1/completions", body);
  EXPECT_EQ(again.body["choices"][0]["text"], choice["text"]);
  EXPECT_EQ(Ids(again.body["choices"][0]), Ids(choice));

  json stream_body = body;
  stream_body["stream"] = true;
  stream_body["stream_options"] = {{"include_usage", true}};
  const auto stream = PostStream(*client_, "/v1/completions", stream_body);
  ASSERT_EQ(stream.status, 200) << stream.raw;
  EXPECT_TRUE(stream.done);
  EXPECT_EQ(StreamText(stream), choice["text"].get<std::string>());
  std::vector<int> streamed;
  for (const auto& chunk : stream.chunks) {
    for (const auto& c : chunk["choices"]) {
      if (c.contains("token_ids")) {
        for (int id : c["token_ids"]) streamed.push_back(id);
      }
    }
  }
  EXPECT_EQ(streamed, Ids(choice));
  EXPECT_EQ(stream.chunks.back()["usage"]["completion_tokens"], 12);
  EXPECT_EQ(stream.chunks[stream.chunks.size() - 2]["choices"][0]["finish_reason"], "length");
}

TEST_F(HttpIntegrationTest, ChatCompletionUsesTheTemplate) {
  const auto r = PostJson(*client_, "/v1/chat/completions",
                          {{"model", "d64_untied"},
                           {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                           {"max_completion_tokens", 4},
                           {"temperature", 0},
                           {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body["object"], "chat.completion");
  EXPECT_EQ(r.body["choices"][0]["message"]["role"], "assistant");
  // "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>
  // \n<|im_start|>assistant\n": 3 + 35 + 1 special tokens... counted by the server.
  EXPECT_GT(r.body["usage"]["prompt_tokens"].get<int>(), 40);
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 4);
}

// response_format json_object: every choice that ends (finish_reason "stop") is one JSON object,
// unary and streamed, chat and completions; the trained default model left to itself writes
// none.
TEST_F(HttpIntegrationTest, JsonObjectModeWritesOneObject) {
  const json free_body = {{"prompt", "The cat"}, {"max_tokens", 40}, {"temperature", 0}};
  const auto free = PostJson(*client_, "/v1/completions", free_body);
  ASSERT_EQ(free.status, 200) << free.body;
  EXPECT_FALSE(json::accept(free.body["choices"][0]["text"].get<std::string>()));
  for (const bool stream : {false, true}) {
    for (const std::string path : {"/v1/chat/completions", "/v1/completions"}) {
      SCOPED_TRACE(path + (stream ? " streamed" : ""));
      json body = {{"response_format", {{"type", "json_object"}}},
                   {"max_tokens", 300},
                   {"temperature", 1.0},
                   {"seed", 7},
                   {"n", 4},
                   {"stream", stream}};
      if (path == "/v1/completions") {
        body["prompt"] = "A JSON object describing a cat:";
      } else {
        body["messages"] = {{{"role", "user"}, {"content", "Describe a cat in JSON."}}};
      }
      const auto [status, raw, texts, finish] = testing::PostForChoices(*client_, path, body);
      ASSERT_EQ(status, 200) << raw;
      ASSERT_EQ(finish.size(), 4u);
      int objects = 0;
      for (const auto& [i, reason] : finish) {
        if (reason != "stop") continue;
        const json parsed = json::parse(texts.at(i), nullptr, /*allow_exceptions=*/false);
        EXPECT_TRUE(parsed.is_object()) << texts.at(i);
        ++objects;
      }
      EXPECT_GE(objects, 2);
    }
  }
}

TEST_F(HttpIntegrationTest, ConcurrentStreamsCompleteWhileALongPromptPrefills) {
  std::vector<int> long_prompt(3000);
  for (size_t i = 0; i < long_prompt.size(); ++i) long_prompt[i] = 3 + (i * 7) % 256;
  std::atomic<int> long_status{0};
  std::thread long_request([&] {
    auto client = Client(*server_);
    const auto r = PostJson(*client, "/v1/completions",
                            {{"prompt", long_prompt}, {"max_tokens", 2}, {"ignore_eos", true}});
    long_status = r.status;
    EXPECT_EQ(r.body["usage"]["prompt_tokens"], 3000) << r.body;
  });
  constexpr int kStreams = 32;
  std::vector<testing::StreamReply> replies(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      auto client = Client(*server_);
      replies[i] = PostStream(*client, "/v1/completions",
                              {{"prompt", {3 + i, 4, 5}},
                               {"max_tokens", 8},
                               {"ignore_eos", true},
                               {"seed", i},
                               {"return_token_ids", true},
                               {"stream", true}});
    });
  }
  for (auto& t : threads) t.join();
  long_request.join();
  EXPECT_EQ(long_status.load(), 200);
  for (int i = 0; i < kStreams; ++i) {
    const auto& r = replies[i];
    ASSERT_EQ(r.status, 200) << i << ": " << r.raw;
    EXPECT_TRUE(r.done) << i;
    size_t tokens = 0;
    for (const auto& chunk : r.chunks) {
      if (chunk["choices"][0].contains("token_ids"))
        tokens += chunk["choices"][0]["token_ids"].size();
    }
    EXPECT_EQ(tokens, 8u) << i;
    EXPECT_EQ(r.chunks.back()["choices"][0]["finish_reason"], "length") << i;
  }
}

TEST_F(HttpIntegrationTest, ClosingTheStreamCancelsAndFreesTheSlot) {
  ASSERT_TRUE(WaitForMetric(*client_, "ridgeserve_state_slots_used", 0));
  const double cancelled_before =
      MetricValue(Metrics(*client_), "ridgeserve_requests_total{status=\"cancelled\"}");
  auto stream_client = Client(*server_);
  int chunks = 0;
  const auto r = PostStream(*stream_client, "/v1/completions",
                            {{"prompt", "Hello"},
                             {"max_tokens", 60000},
                             {"ignore_eos", true},
                             {"return_token_ids", true},
                             {"stream", true}},
                            [&](const json&) { return ++chunks < 3; });
  EXPECT_TRUE(r.aborted);
  stream_client->stop();
  EXPECT_TRUE(WaitForMetric(*client_, "ridgeserve_state_slots_used", 0)) << Metrics(*client_);
  EXPECT_TRUE(WaitForMetric(*client_, "ridgeserve_requests_total{status=\"cancelled\"}",
                            cancelled_before + 1));
}

// A request whose client hangs up is cancelled, non-streaming (it used to run to the end, counted
// ok) and streamed: once while it decodes, once while a long prompt is still prefilling.
TEST_F(HttpIntegrationTest, ClosingAUnaryRequestCancelsIt) {
  ASSERT_TRUE(WaitForMetric(*client_, "ridgeserve_state_slots_used", 0));
  for (const int prompt_tokens : {1, 4000}) {
    const double cancelled_before =
        MetricValue(Metrics(*client_), "ridgeserve_requests_total{status=\"cancelled\"}");
    std::vector<int> prompt(prompt_tokens);
    for (int i = 0; i < prompt_tokens; ++i) prompt[i] = 5 + (i * 7) % 100;
    {
      auto unary_client = Client(*server_);
      unary_client->set_read_timeout(0, 300000);  // gives up (and closes) after 0.3 s
      const auto r = PostJson(*unary_client, "/v1/completions",
                              {{"prompt", prompt}, {"max_tokens", 60000}, {"ignore_eos", true}});
      EXPECT_EQ(r.status, 0) << "expected no answer within 0.3 s, got " << r.status;
      unary_client->stop();
    }
    EXPECT_TRUE(WaitForMetric(*client_, "ridgeserve_requests_total{status=\"cancelled\"}",
                              cancelled_before + 1))
        << prompt_tokens << " prompt tokens: " << Metrics(*client_);
    EXPECT_TRUE(WaitForMetric(*client_, "ridgeserve_state_slots_used", 0)) << Metrics(*client_);
    // The same streamed: the client gives up before (or right after) the first chunk.
    {
      auto stream_client = Client(*server_);
      stream_client->set_read_timeout(0, 300000);
      PostStream(
          *stream_client, "/v1/completions",
          {{"prompt", prompt}, {"max_tokens", 60000}, {"ignore_eos", true}, {"stream", true}},
          [](const nlohmann::json&) { return false; });
      stream_client->stop();
    }
    EXPECT_TRUE(WaitForMetric(*client_, "ridgeserve_requests_total{status=\"cancelled\"}",
                              cancelled_before + 2))
        << prompt_tokens << " prompt tokens, streamed: " << Metrics(*client_);
    EXPECT_TRUE(WaitForMetric(*client_, "ridgeserve_state_slots_used", 0)) << Metrics(*client_);
  }
}

TEST_F(HttpIntegrationTest, DeadlineExpiry) {
  const auto r = PostJson(
      *client_, "/v1/completions",
      {{"prompt", "Hello"}, {"max_tokens", 60000}, {"ignore_eos", true}, {"timeout", 0.3}});
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_EQ(r.body["error"]["code"], "deadline_exceeded");
  const auto s = PostStream(*client_, "/v1/completions",
                            {{"prompt", "Hello"},
                             {"max_tokens", 60000},
                             {"ignore_eos", true},
                             {"timeout", 0.3},
                             {"stream", true}});
  ASSERT_EQ(s.status, 200);
  ASSERT_FALSE(s.chunks.empty());
  EXPECT_EQ(s.chunks.back()["error"]["code"], "deadline_exceeded") << s.raw;
  EXPECT_TRUE(WaitForMetric(*client_, "ridgeserve_state_slots_used", 0));
}

TEST_F(HttpIntegrationTest, InvalidFieldsAreRejectedWithTheirName) {
  struct Case {
    json body;
    int status;
    const char* param;
  };
  const std::vector<Case> cases = {
      {{{"prompt", "x"}, {"temperature", -1}}, 400, "temperature"},
      {{{"prompt", "x"}, {"top_p", 0}}, 400, "top_p"},
      {{{"prompt", "x"}, {"max_tokens", "ten"}}, 400, "max_tokens"},
      {{{"prompt", "x"}, {"n", 0}}, 400, "n"},
      {{{"prompt", "x"}, {"stop", {1}}}, 400, "stop"},
      {{{"prompt", "x"}, {"solver_tolerance", 5}}, 400, "solver_tolerance"},
      {{{"prompt", "x"}, {"solver_max_iterations", 1001}}, 400, "solver_max_iterations"},
      {{{"prompt", {1, 99999}}}, 400, "prompt"},
      {{{"prompt", "x"}, {"logprobs", 50}}, 400, "logprobs"},
      {{{"prompt", "x"}, {"model", "other"}}, 404, "model"},
      {{{"prompt", std::vector<int>(5000, 7)}}, 413, "prompt"},
  };
  for (const Case& c : cases) {
    const auto r = PostJson(*client_, "/v1/completions", c.body);
    EXPECT_EQ(r.status, c.status) << c.body << " -> " << r.body;
    EXPECT_EQ(r.body["error"]["param"], c.param) << c.body << " -> " << r.body;
    EXPECT_FALSE(r.body["error"]["message"].get<std::string>().empty());
    EXPECT_TRUE(r.body["error"].contains("type"));
  }
}

TEST_F(HttpIntegrationTest, MetricsHaveTheDocumentedNamesAndPassPromtool) {
  // Something to count first.
  PostJson(*client_, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}});
  const std::string text = Metrics(*client_);
  for (const char* name : testing::kDocumentedMetricNames) {
    EXPECT_NE(text.find(std::string("# TYPE ") + name + " "), std::string::npos) << name;
  }
  EXPECT_EQ(MetricValue(text, "ridgeserve_state_slots"), 48);
  EXPECT_GT(MetricValue(text, "ridgeserve_generation_tokens_total"), 0);
  EXPECT_GT(MetricValue(text,
                        "ridgeserve_solver_iterations_count{layer_type=\"mesa\","
                        "phase=\"decode\"}"),
            0);
  if (std::system("command -v promtool > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not installed (Debian package prometheus): exposition unchecked";
  }
  const auto file = TempDir() / "metrics.txt";
  std::ofstream(file) << text;
  // promtool exits 1 on a malformed exposition and 3 on naming-convention lint: both fail.
  const auto [code, output] = testing::RunCommand("promtool check metrics < " + file.string());
  EXPECT_EQ(code, 0) << "promtool check metrics found:\n" << output << text;
}

TEST(HttpServeFlagsTest, BadFlagsFailFastWithAClearMessage) {
  struct Case {
    std::string args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"--model " + kModel.string() + " --slots 0", "slots"},
      {"--model " + kModel.string() + " --tokenizer /nonexistent", "no tokenizer.json"},
      {"--model " + kModel.string() + " --solver-max-iterations 50 --max-solver-iterations 40",
       "--max-solver-iterations"},
      {"--model " + kModel.string() + " --http-prot 1", "http-prot"},
      {"--model " + kModel.string() + " --api-key short", "8 to 256 characters"},
      {"--model " + kModel.string() + " --api-key-file /nonexistent/keys", "cannot be read"},
      {"--model " + kModel.string() + " --load-format dummy", "--load-format"},
      {"--model " + ConfigOnlyModel().string(), "model.safetensors"},
      {"--model " + (TempDir() / "nonexistent").string() + " --load-format random",
       "does not exist"},
      {"--model " + kModel.string() + " --reasoning-parser deepseek", "only reasoning parser"},
      {"--model " + kModel.string() + " --http-max-connections 5", "--http-max-connections"},
      {"--model " + kModel.string() + " --http-max-connections-per-client -1",
       "--http-max-connections-per-client"},
      {"--model " + kModel.string() + " --http-idle-timeout 0", "--http-idle-timeout"},
      {"--model " + kModel.string() + " --http-header-timeout 0", "--http-header-timeout"},
      {"--model " + kModel.string() + " --http-threads 0", "--http-threads"},
      {"--model " + kModel.string() + " --tokenizer " + (TempDir() / "tokenizer").string() +
           " --chat-template /nonexistent/t.jinja",
       "--chat-template /nonexistent/t.jinja: cannot read"},
      // A template the interpreter cannot run stops the start-up, naming line and column.
      {"--model " + kModel.string() + " --tokenizer " + (TempDir() / "tokenizer").string() +
           " --chat-template " + BadTemplate().string(),
       "line 2, column 31: unsupported filter 'explode'"},
  };
  for (const Case& c : cases) {
    const auto [code, output] =
        testing::RunCommand(std::string(RIDGESERVE_BINARY) + " serve " + c.args);
    EXPECT_TRUE(code > 0) << c.args << "\n" << output;
    EXPECT_NE(output.find(c.message), std::string::npos) << c.args << "\n" << output;
  }
}

TEST(HttpServeFlagsTest, VersionSaysWhatTheBinaryIs) {
  const auto [code, output] = testing::RunCommand(std::string(RIDGESERVE_BINARY) + " --version");
  EXPECT_EQ(code, 0) << output;
  EXPECT_EQ(output.rfind("ridgeserve ", 0), 0u) << output;
  EXPECT_NE(output.find("(revision "), std::string::npos) << output;
  EXPECT_NE(output.find(" build, "), std::string::npos) << output;
}

// --load-format random serves a configuration without its checkpoint: a folder holding only
// config.json serves completions of the length asked for, and the log says the weights are
// random.
TEST(HttpRandomWeightsTest, ServesAConfigWithoutItsCheckpoint) {
  auto server = StartServer({"--load-format", "random"}, "random_weights", ConfigOnlyModel());
  ASSERT_NE(server, nullptr);
  EXPECT_NE(server->Log().find("the weights are random"), std::string::npos) << server->Log();
  auto client = Client(*server);
  const auto r = PostJson(*client, "/v1/completions",
                          {{"prompt", "Hello"}, {"max_tokens", 6}, {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 6);
  EXPECT_EQ(r.body["model"], "config_only");
}

TEST(HttpQueueTest, FullQueueIsAnImmediate429) {
  auto server = StartServer({"--slots", "1", "--max-waiting", "1"}, "queue");
  ASSERT_NE(server, nullptr);
  // Without --prefill-token-budget the backend's own (the CPU's: 512) is used.
  EXPECT_NE(server->Log().find("prefill budget 512 tokens/step"), std::string::npos)
      << server->Log();
  auto metrics = Client(*server);
  const json long_stream = {
      {"prompt", "Hi"}, {"max_tokens", 60000}, {"ignore_eos", true}, {"stream", true}};
  // One running, one waiting: both hold their connection open until told to stop.
  std::atomic<bool> stop{false};
  std::vector<std::thread> holders;
  for (int i = 0; i < 2; ++i) {
    holders.emplace_back([&] {
      auto client = Client(*server);
      PostStream(*client, "/v1/completions", long_stream,
                 [&](const json&) { return !stop.load(); });
    });
    if (i == 0) {
      EXPECT_TRUE(WaitForMetric(*metrics, "ridgeserve_requests_running", 1));
    }
  }
  EXPECT_TRUE(WaitForMetric(*metrics, "ridgeserve_requests_waiting", 1)) << Metrics(*metrics);
  const auto start = std::chrono::steady_clock::now();
  const auto r = PostJson(*metrics, "/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(r.body["error"]["code"], "queue_full");
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("queue is full"), std::string::npos);
  // The waiting request is still waiting: closing the running stream lets it in.
  stop = true;
  for (auto& t : holders) t.join();
  EXPECT_TRUE(WaitForMetric(*metrics, "ridgeserve_state_slots_used", 0));
}

TEST(HttpDrainTest, SigtermFinishesRunningStreamsThenExitsZero) {
  auto server = StartServer({"--drain-seconds", "30"}, "drain");
  ASSERT_NE(server, nullptr);
  std::atomic<bool> signalled{false};
  testing::StreamReply reply;
  std::thread stream([&] {
    auto client = Client(*server);
    reply = PostStream(*client, "/v1/completions",
                       {{"prompt", "Hi"},
                        {"max_tokens", 200},
                        {"ignore_eos", true},
                        {"return_token_ids", true},
                        {"stream", true}},
                       [&](const json&) {
                         if (!signalled.exchange(true)) server->Signal(SIGTERM);
                         return true;
                       });
  });
  // While the stream runs: not ready, and new requests are refused.
  auto client = Client(*server);
  bool saw_503 = false;
  for (int i = 0; i < 500 && !saw_503; ++i) {
    if (signalled) {
      auto ready = client->Get("/ready");
      saw_503 = ready && ready->status == 503;
    }
    if (!saw_503) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(saw_503);
  const auto refused = PostJson(*client, "/v1/completions", {{"prompt", "Hi"}});
  if (refused.status != 0) {
    EXPECT_EQ(refused.status, 503) << refused.body;
  }
  stream.join();
  EXPECT_TRUE(reply.done) << reply.raw.substr(0, 500);
  ASSERT_FALSE(reply.chunks.empty());
  EXPECT_EQ(reply.chunks.back()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(server->Wait(std::chrono::seconds(30)), 0) << server->Log();
  EXPECT_NE(server->Log().find("drained"), std::string::npos) << server->Log();
}

#ifdef RIDGE_GRPC_CLIENT
TEST(CrossTransportTest, SameSeedGivesTheSameTextOverHttpAndGrpc) {
  auto server = StartServer({"--grpc-port", "0"}, "cross_transport");
  ASSERT_NE(server, nullptr);
  const int grpc_port = server->GrpcPort();
  ASSERT_NE(grpc_port, 0) << server->Log();
  auto client = Client(*server);
  const json body = {
      {"prompt", {1, 2, 3, 4}}, {"max_tokens", 12}, {"temperature", 0.8}, {"seed", 5}};
  const auto http = PostJson(*client, "/v1/completions", body);
  ASSERT_EQ(http.status, 200) << http.body;
  const std::string http_text = http.body["choices"][0]["text"];

  const std::string command = std::string(RIDGE_GRPC_CLIENT) +
                              " --address 127.0.0.1:" + std::to_string(grpc_port) +
                              " --prompt-ids 1,2,3,4 --max-tokens 12 --temperature 0.8 --seed 5"
                              " --stream 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  std::string grpc_text;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) grpc_text.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0);
  EXPECT_FALSE(http_text.empty());
  EXPECT_EQ(grpc_text, http_text);
}
#endif

}  // namespace
}  // namespace ridge
