// The rest of the OpenAI / vLLM surface over HTTP, against the scripted fake engine: n choices
// (each its own request, seeds offset), echo, include_stop_str_in_output, POST /tokenize and
// POST /detokenize.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/server/tiny_openai_server.h"

namespace ridge {
namespace {

using nlohmann::json;
using testing::PostJson;
using testing::PostStream;

class HttpSurfaceTest : public testing::TinyOpenAiServerTest {};

TEST_F(HttpSurfaceTest, NChoicesAreIndependentRequestsWithOffsetSeeds) {
  const auto r = PostJson(*client_, "/v1/chat/completions",
                          {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                           {"max_tokens", 5},
                           {"n", 3},
                           {"seed", 40}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.body["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r.body["choices"][i]["index"], i);
    EXPECT_EQ(r.body["choices"][i]["message"]["content"], "Hello");
  }
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 15);
  EXPECT_EQ(r.body["usage"]["total_tokens"], r.body["usage"]["prompt_tokens"].get<int>() + 15);
  ASSERT_EQ(backend_.all_requests.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(backend_.all_requests[i].sampling.seed, 40u + i);

  // Streamed: every choice's deltas and its own finish, usage once, then [DONE].
  const auto s = PostStream(*client_, "/v1/completions",
                            {{"prompt", "x"},
                             {"max_tokens", 4},
                             {"n", 2},
                             {"stream", true},
                             {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(s.status, 200) << s.raw;
  EXPECT_TRUE(s.done);
  std::string text[2];
  int finishes = 0;
  for (const json& chunk : s.chunks) {
    for (const json& choice : chunk["choices"]) {
      text[choice["index"].get<int>()] += choice["text"].get<std::string>();
      if (!choice["finish_reason"].is_null()) ++finishes;
    }
  }
  EXPECT_EQ(text[0], "Hell");
  EXPECT_EQ(text[1], "Hell");
  EXPECT_EQ(finishes, 2);
  EXPECT_EQ(s.chunks.back()["usage"]["completion_tokens"], 8);
}

TEST_F(HttpSurfaceTest, EchoAndIncludeStopString) {
  auto r = PostJson(*client_, "/v1/completions",
                    {{"prompt", "Say: "}, {"max_tokens", 5}, {"echo", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body["choices"][0]["text"], "Say: Hello");
  const auto s =
      PostStream(*client_, "/v1/completions",
                 {{"prompt", "Say: "}, {"max_tokens", 5}, {"echo", true}, {"stream", true}});
  ASSERT_EQ(s.status, 200);
  EXPECT_EQ(s.chunks.front()["choices"][0]["text"], "Say: ");
  EXPECT_EQ(testing::StreamText(s), "Say: Hello");

  r = PostJson(*client_, "/v1/completions",
               {{"prompt", "x"}, {"max_tokens", 20}, {"stop", "world"}});
  EXPECT_EQ(r.body["choices"][0]["text"], "Hello ");
  r = PostJson(*client_, "/v1/completions",
               {{"prompt", "x"},
                {"max_tokens", 20},
                {"stop", "world"},
                {"include_stop_str_in_output", true}});
  EXPECT_EQ(r.body["choices"][0]["text"], "Hello world");
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
}

TEST_F(HttpSurfaceTest, TokenizeAndDetokenizeRoundTrip) {
  auto r = PostJson(*client_, "/tokenize", {{"prompt", "Hi!"}, {"return_token_strs", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body["count"], 3);
  EXPECT_EQ(r.body["max_model_len"], 100);
  EXPECT_EQ(r.body["tokens"], json({testing::TinyTokenId('H'), testing::TinyTokenId('i'),
                                    testing::TinyTokenId('!')}));
  EXPECT_EQ(r.body["token_strs"], json({"H", "i", "!"}));
  const auto back = PostJson(*client_, "/detokenize", {{"tokens", r.body["tokens"]}});
  ASSERT_EQ(back.status, 200) << back.body;
  EXPECT_EQ(back.body["prompt"], "Hi!");

  // The chat form renders the template first (and adds no special tokens of its own).
  r = PostJson(*client_, "/tokenize", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  const auto text = PostJson(*client_, "/detokenize", {{"tokens", r.body["tokens"]}});
  EXPECT_EQ(text.body["prompt"],
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi"
            "<|im_end|>\n<|im_start|>assistant\n");

  r = PostJson(*client_, "/detokenize", {{"tokens", {1, 100000}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "tokens");
  EXPECT_EQ(r.body["error"]["message"].get<std::string>().rfind("tokens[1] must be a token id", 0),
            0u)
      << r.body;
  r = PostJson(*client_, "/tokenize", {{"prompt", 5}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "prompt");
  r = PostJson(*client_, "/tokenize", {{"prompt", "x"}, {"model", "other"}});
  EXPECT_EQ(r.status, 404);
  const auto get = client_->Get("/tokenize");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
}

// A body nested a million deep parses (nlohmann does not recurse there) but crashed the server
// when an error message quoted it (dumping recurses once per level): every JSON text from outside
// is now measured first. The server answers 400 and goes on serving.
TEST_F(HttpSurfaceTest, DeeplyNestedJsonIsRefusedNotACrash) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  const std::string quoted = json(deep).dump();
  const std::vector<std::pair<std::string, std::string>> posts = {
      {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": " + deep + "}"},
      {"/v1/chat/completions", "{\"messages\": " + deep + "}"},
      {"/tokenize", "{\"prompt\": " + deep + "}"},
      {"/v1/chat/completions",
       "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"c\", \"type\": "
       "\"function\", \"function\": {\"name\": \"f\", \"arguments\": " +
           quoted + "}}]}]}"},
      {"/v1/chat/completions",
       "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"response_format\": "
       "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"n\", \"schema\": " +
           deep + "}}}"},
  };
  for (const auto& [path, body] : posts) {
    const auto r = client_->Post(path.c_str(), body, "application/json");
    ASSERT_TRUE(r) << path << ": " << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 400) << path << ": " << r->body.substr(0, 300);
    EXPECT_NE(r->body.find("nests deeper than 128 levels"), std::string::npos)
        << path << ": " << r->body.substr(0, 300);
  }
  const auto alive = PostJson(*client_, "/tokenize", {{"prompt", "Hi!"}});
  EXPECT_EQ(alive.status, 200) << alive.body;
}

}  // namespace
}  // namespace ridge
