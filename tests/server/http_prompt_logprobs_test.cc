// Scoring prompts over HTTP, against the scripted fake engine (its prompt logprobs are
// ScriptedPromptLogprobs): a list of prompts in one completions request (n choices each,
// numbered prompt by prompt), OpenAI's echo with logprobs (the prompt's tokens lead the
// logprobs, the first one's null), and vLLM's prompt_logprobs in completions and chat. What
// lm-evaluation-harness's local-completions model sends for loglikelihood tasks.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/server/tiny_openai_server.h"

namespace ridge {
namespace {

using nlohmann::json;
using testing::PostJson;
using testing::PostStream;
using testing::TinyTokenId;

std::string Id(char c) { return std::to_string(TinyTokenId(static_cast<unsigned char>(c))); }

class HttpPromptLogprobsTest : public testing::TinyOpenAiServerTest {};

TEST_F(HttpPromptLogprobsTest, AListOfPromptsGetsNChoicesEach) {
  const auto r =
      PostJson(*client_, "/v1/completions",
               {{"prompt", {"ab", {TinyTokenId('x'), TinyTokenId('y'), TinyTokenId('z')}}},
                {"n", 2},
                {"max_tokens", 3},
                {"seed", 7},
                {"echo", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.body["choices"].size(), 4u);
  const std::vector<std::string> want = {"abHel", "abHel", "xyzHel", "xyzHel"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r.body["choices"][i]["index"], i);
    EXPECT_EQ(r.body["choices"][i]["text"], want[i]);
  }
  ASSERT_EQ(backend_.all_requests.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(backend_.all_requests[i].prompt.size(), i < 2 ? 2u : 3u);
    EXPECT_EQ(backend_.all_requests[i].sampling.seed, 7u + i % 2);
  }
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 12);

  // Streamed: each choice's text under its index, the echo first.
  const auto s =
      PostStream(*client_, "/v1/completions",
                 {{"prompt", {"ab", "q"}}, {"max_tokens", 2}, {"echo", true}, {"stream", true}});
  ASSERT_EQ(s.status, 200) << s.raw;
  std::string text[2];
  for (const json& chunk : s.chunks) {
    for (const json& choice : chunk["choices"]) {
      text[choice["index"].get<int>()] += choice["text"].get<std::string>();
    }
  }
  EXPECT_EQ(text[0], "abHe");
  EXPECT_EQ(text[1], "qHe");

  // A prompt of the list that does not fit is named.
  const auto bad = PostJson(*client_, "/v1/completions",
                            {{"prompt", {"ok", std::string(300, 'x')}}, {"max_tokens", 1}});
  EXPECT_EQ(bad.status, 413) << bad.body;
  EXPECT_EQ(bad.body["error"]["param"], "prompt[1]");
  EXPECT_NE(bad.body["error"]["message"].get<std::string>().find(
                "prompt[1] has 300 tokens; this server accepts at most 100"),
            std::string::npos)
      << bad.body;
}

TEST_F(HttpPromptLogprobsTest, EchoWithLogprobsScoresThePrompt) {
  const auto r = PostJson(*client_, "/v1/completions",
                          {{"prompt", "abc"}, {"max_tokens", 2}, {"echo", true}, {"logprobs", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(backend_.last_request.prompt_logprobs, 2);
  const json& choice = r.body["choices"][0];
  EXPECT_EQ(choice["text"], "abcHe");
  const json& lp = choice["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"a", "b", "c", "H", "e"}));
  EXPECT_EQ(lp["token_logprobs"], json({nullptr, -0.25, -0.5, -0.5, -0.5}));
  EXPECT_EQ(lp["top_logprobs"][0], nullptr);
  EXPECT_EQ(lp["top_logprobs"][1], json({{"a", -0.1f}, {"b", -0.2f}}));
  EXPECT_EQ(lp["top_logprobs"][3], json({{"H", -0.5}}));
  EXPECT_EQ(lp["text_offset"], json({0, 1, 2, 3, 4}));
  EXPECT_FALSE(choice.contains("prompt_logprobs"));

  // Streamed: the echo chunk carries the prompt's logprobs, the rest follow.
  const auto s = PostStream(
      *client_, "/v1/completions",
      {{"prompt", "abc"}, {"max_tokens", 2}, {"echo", true}, {"logprobs", 1}, {"stream", true}});
  ASSERT_EQ(s.status, 200) << s.raw;
  const json& first = s.chunks.front()["choices"][0];
  EXPECT_EQ(first["text"], "abc");
  EXPECT_EQ(first["logprobs"]["tokens"], json({"a", "b", "c"}));
  EXPECT_EQ(first["logprobs"]["token_logprobs"], json({nullptr, -0.25, -0.5}));
  EXPECT_EQ(first["logprobs"]["top_logprobs"][2], json({{"a", -0.1f}}));
  json tokens = json::array(), offsets = json::array();
  for (const json& chunk : s.chunks) {
    for (const json& c : chunk["choices"]) {
      if (c["logprobs"].is_null()) continue;
      for (const json& t : c["logprobs"]["tokens"]) tokens.push_back(t);
      for (const json& o : c["logprobs"]["text_offset"]) offsets.push_back(o);
    }
  }
  EXPECT_EQ(tokens, json({"a", "b", "c", "H", "e"}));
  EXPECT_EQ(offsets, json({0, 1, 2, 3, 4}));
}

TEST_F(HttpPromptLogprobsTest, VllmPromptLogprobs) {
  auto r = PostJson(*client_, "/v1/completions",
                    {{"prompt", "abc"}, {"max_tokens", 1}, {"prompt_logprobs", 1}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(backend_.last_request.prompt_logprobs, 1);
  const json& p = r.body["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(p.size(), 3u) << p;
  EXPECT_EQ(p[0], nullptr);
  EXPECT_EQ(p[1], json({{Id('b'), {{"logprob", -0.25}, {"rank", 2}, {"decoded_token", "b"}}},
                        {Id('a'), {{"logprob", -0.1f}, {"rank", 1}, {"decoded_token", "a"}}}}));
  EXPECT_EQ(p[2][Id('c')]["rank"], 3);
  EXPECT_TRUE(r.body["choices"][0]["logprobs"].is_null());

  // With echo and logprobs too: one engine request scores for both, each list its own count.
  r = PostJson(*client_, "/v1/completions",
               {{"prompt", "abc"},
                {"max_tokens", 1},
                {"prompt_logprobs", 0},
                {"echo", true},
                {"logprobs", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(backend_.last_request.prompt_logprobs, 2);
  EXPECT_EQ(r.body["choices"][0]["prompt_logprobs"][1].size(), 1u);
  EXPECT_EQ(r.body["choices"][0]["logprobs"]["top_logprobs"][1].size(), 2u);

  // Chat: the response's, for the rendered prompt.
  r = PostJson(*client_, "/v1/chat/completions",
               {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                {"max_tokens", 1},
                {"n", 2},
                {"prompt_logprobs", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json& chat = r.body["prompt_logprobs"];
  ASSERT_EQ(chat.size(), backend_.last_request.prompt.size());
  EXPECT_EQ(chat[0], nullptr);
  EXPECT_EQ(chat[1].size(), 1u);
  EXPECT_FALSE(r.body["choices"][0].contains("prompt_logprobs"));

  // Not with a stream (as vLLM), nor without the request scoring anything.
  r = PostJson(*client_, "/v1/completions",
               {{"prompt", "abc"}, {"prompt_logprobs", 1}, {"stream", true}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.body["error"]["param"], "prompt_logprobs");
  r = PostJson(*client_, "/v1/completions", {{"prompt", "abc"}, {"max_tokens", 1}});
  EXPECT_EQ(backend_.last_request.prompt_logprobs, -1);
}

}  // namespace
}  // namespace ridge
