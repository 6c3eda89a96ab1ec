// Chat through a real checkpoint template (Qwen3's) over HTTP, against the scripted fake engine:
// tools and tool results rendered into the prompt, enable_thinking, the model's <think> text as
// reasoning_content and its <tool_call> blocks as OpenAI tool_calls (unary and streamed), and the
// 400s for requests or conversations the template cannot take.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "sampling/json_schema.h"
#include "server/http_server.h"
#include "tests/server/fake_backend.h"
#include "tests/server/http_test_client.h"
#include "tests/server/running_http_server.h"
#include "tests/server/tiny_tokenizer.h"

namespace ridge {
namespace {

using nlohmann::json;
using testing::PostJson;
using testing::PostStream;

std::string ReadTemplate(const std::string& file) {
  std::ifstream in(std::filesystem::path(RIDGE_TEST_DATA_DIR) / "chat_templates" / file);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const json kWeatherTool = json::parse(R"({"type": "function", "function": {
    "name": "get_weather", "description": "Weather now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})");

class HttpChatTest : public ::testing::Test {
 protected:
  virtual std::string TemplateFile() const { return "qwen3.jinja"; }
  virtual json TokenizerJson() const { return testing::TinyTokenizerJson(); }
  void SetUp() override {
    tokenizer_ =
        *Tokenizer::FromJson(TokenizerJson().dump(), testing::TinyTokenizerConfigJson().dump());
    auto chat = ChatTemplate::FromSource(TemplateFile(), ReadTemplate(TemplateFile()),
                                         ChatSpecialTokens::FromConfig(tokenizer_->config()));
    ASSERT_TRUE(chat.ok()) << chat.status();
    chat_ = std::make_unique<ChatTemplate>(*chat);
    HttpServerOptions options;
    options.model_id = "tiny";
    options.limits.vocab_size = 512;
    options.limits.max_new_tokens = 1000;
    options.reasoning_parser = "qwen3";
    running_ = testing::RunningHttpServer::Start(&backend_, tokenizer_.get(), chat_.get(), nullptr,
                                                 options);
    ASSERT_NE(running_, nullptr);
    client_ = running_->Client();
  }
  std::string LastPrompt() { return *tokenizer_->Decode(backend_.last_request.prompt, false); }
  // The fake engine says `text` and stops as at EOS.
  json Says(const std::string& text, json body) {
    backend_.script = text;
    backend_.finish_reason = FinishReason::kEos;
    body["max_tokens"] = text.size();
    return body;
  }

  testing::FakeBackend backend_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> chat_;
  std::unique_ptr<testing::RunningHttpServer> running_;
  std::unique_ptr<httplib::Client> client_;
};

// A choice that is one call of get_weather for Paris and nothing else.
void ExpectTheWeatherCall(const json& choice, const std::string& finish_reason) {
  EXPECT_EQ(choice["finish_reason"], finish_reason);
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], R"({"city": "Paris"})");
}

constexpr char kCallingOutput[] =
    "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
    "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

TEST_F(HttpChatTest, ToolsRenderAndToolCallsComeBackParsed) {
  const json body = Says(kCallingOutput, {{"messages", {{{"role", "user"}, {"content", "Paris?"}}}},
                                          {"tools", {kWeatherTool}}});
  const auto r = PostJson(*client_, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string prompt = LastPrompt();
  EXPECT_NE(prompt.find("# Tools\n\nYou may call one or more functions"), std::string::npos);
  // The tool's schema as tojson writes it (this test's nlohmann::json sends the keys sorted).
  EXPECT_NE(prompt.find(R"({"function": {"description": "Weather now.", "name": "get_weather", )"
                        R"("parameters": {"properties": {"city": {"type": "string"}}, )"
                        R"("type": "object"}}, "type": "function"})"),
            std::string::npos)
      << prompt;
  const std::string tail = "<|im_start|>user\nParis?<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(prompt.substr(prompt.size() - tail.size()), tail);
  const json& choice = r.body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["reasoning_content"], "\nThe user wants weather.\n");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["id"].get<std::string>().substr(0, 14), "chatcmpl-tool-");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], "{\"city\": \"Paris\"}");

  // Streamed: reasoning deltas, then one delta with the whole call, then "tool_calls".
  json stream_body = body;
  stream_body["stream"] = true;
  const auto s = PostStream(*client_, "/v1/chat/completions", stream_body);
  ASSERT_EQ(s.status, 200) << s.raw;
  std::string reasoning, content;
  json calls = json::array();
  for (const json& chunk : s.chunks) {
    const json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"];
    if (delta.contains("content")) content += delta["content"];
    if (delta.contains("tool_calls")) {
      for (const json& c : delta["tool_calls"]) calls.push_back(c);
    }
  }
  EXPECT_EQ(reasoning, "\nThe user wants weather.\n");
  EXPECT_EQ(content, "\n\n");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(s.chunks.back()["choices"][0]["finish_reason"], "tool_calls");
}

// A named tool_choice: the output is constrained to the function's parameters (the engine gets
// them as its JSON schema) and comes back as that call, finish_reason "stop" as OpenAI gives it.
TEST_F(HttpChatTest, ANamedToolChoiceConstrainsTheOutputToItsArguments) {
  json body =
      Says(R"({"city": "Paris"})",
           {{"messages", {{{"role", "user"}, {"content", "Paris?"}}}}, {"tools", {kWeatherTool}}});
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const auto r = PostJson(*client_, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const auto& schema = backend_.last_request.sampling.json_schema;
  ASSERT_NE(schema, nullptr);
  EXPECT_NE(backend_.last_request.sampling.json_output, nullptr);
  // The parameters' one property, "city", a string.
  EXPECT_EQ(schema->node(0).kind, JsonSchema::Kind::kObject);
  EXPECT_EQ(schema->node(0).literals, std::vector<std::string>{"\"city\""});
  ExpectTheWeatherCall(r.body["choices"][0], "stop");

  body["stream"] = true;
  const auto s = PostStream(*client_, "/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200) << s.raw;
  // Streamed as generated: the first piece names the call, the rest add to its arguments.
  json pieces = json::array();
  for (const json& chunk : s.chunks) {
    const json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("tool_calls")) {
      for (const json& c : delta["tool_calls"]) pieces.push_back(c);
    }
  }
  ASSERT_GT(pieces.size(), 1u);
  EXPECT_EQ(pieces[0]["index"], 0);
  EXPECT_EQ(pieces[0]["type"], "function");
  EXPECT_EQ(pieces[0]["id"].get<std::string>().substr(0, 14), "chatcmpl-tool-");
  EXPECT_EQ(pieces[0]["function"]["name"], "get_weather");
  std::string arguments;
  for (const json& piece : pieces) {
    EXPECT_EQ(piece["index"], 0);
    if (&piece != &pieces[0]) {
      EXPECT_FALSE(piece.contains("id"));
      EXPECT_FALSE(piece["function"].contains("name"));
    }
    arguments += piece["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(arguments, R"({"city": "Paris"})");
  EXPECT_EQ(s.chunks.back()["choices"][0]["finish_reason"], "stop");

  // Parameters the constraint cannot take: not constrained (best effort, as OpenAI treats a
  // function without "strict"), the model's Hermes blocks parsed as without a tool_choice; with
  // "strict": true a 400 naming the keyword.
  json minimum = kWeatherTool;
  minimum["function"]["parameters"]["properties"]["days"] = {{"type", "integer"}, {"minimum", 1}};
  body = Says(kCallingOutput, body);
  body["stream"] = false;
  body["tools"] = {minimum};
  const auto unconstrained = PostJson(*client_, "/v1/chat/completions", body);
  ASSERT_EQ(unconstrained.status, 200) << unconstrained.body;
  EXPECT_EQ(backend_.last_request.sampling.json_schema, nullptr);
  EXPECT_EQ(unconstrained.body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(unconstrained.body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            R"({"city": "Paris"})");
  minimum["function"]["strict"] = true;
  body["tools"] = {minimum};
  const auto refused = PostJson(*client_, "/v1/chat/completions", body);
  ASSERT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(refused.body["error"]["param"], "tool_choice");
  EXPECT_NE(refused.body["error"]["message"].get<std::string>().find(
                "the parameters of 'get_weather' cannot constrain its arguments: at "
                "#/properties/days: keyword \"minimum\" is not supported"),
            std::string::npos)
      << refused.body;
}

// tool_choice "required": the output is constrained to a list of calls, which come back as the
// calls ("tool_calls", as when the model chooses them).
TEST_F(HttpChatTest, RequiredToolChoiceConstrainsTheOutputToCalls) {
  json body = Says(R"([{"name": "get_weather", "arguments": {"city": "Paris"}}])",
                   {{"messages", {{{"role", "user"}, {"content", "Paris?"}}}},
                    {"tools", {kWeatherTool}},
                    {"tool_choice", "required"}});
  const auto r = PostJson(*client_, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_NE(backend_.last_request.sampling.json_schema, nullptr);
  EXPECT_EQ(backend_.last_request.sampling.json_schema->node(0).kind, JsonSchema::Kind::kArray);
  ExpectTheWeatherCall(r.body["choices"][0], "tool_calls");

  // Streamed: the call opens once its name is complete, its arguments follow piece by piece.
  body["stream"] = true;
  const auto s = PostStream(*client_, "/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200) << s.raw;
  std::string arguments;
  int opened = 0;
  for (const json& chunk : s.chunks) {
    const json& delta = chunk["choices"][0]["delta"];
    if (!delta.contains("tool_calls")) continue;
    for (const json& piece : delta["tool_calls"]) {
      EXPECT_EQ(piece["index"], 0);
      if (piece.contains("id")) {
        ++opened;
        EXPECT_EQ(piece["function"]["name"], "get_weather");
      }
      arguments += piece["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(opened, 1);
  EXPECT_EQ(arguments, R"({"city": "Paris"})");
  EXPECT_EQ(s.chunks.back()["choices"][0]["finish_reason"], "tool_calls");
}

TEST_F(HttpChatTest, ToolResultsAndThinkingSwitchReachTheTemplate) {
  const json messages = json::parse(R"([
      {"role": "user", "content": "Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}])");
  const auto r =
      PostJson(*client_, "/v1/chat/completions",
               Says("It is 18 C.", {{"messages", messages},
                                    {"tools", {kWeatherTool}},
                                    {"chat_template_kwargs", {{"enable_thinking", false}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string prompt = LastPrompt();
  EXPECT_NE(prompt.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                        "\"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n"
                        "18 C\n</tool_response><|im_end|>\n"),
            std::string::npos)
      << prompt;
  EXPECT_EQ(prompt.substr(prompt.size() - 19), "<think>\n\n</think>\n\n");
  const json& message = r.body["choices"][0]["message"];
  EXPECT_EQ(message["content"], "It is 18 C.");
  EXPECT_TRUE(message["reasoning_content"].is_null());
  EXPECT_FALSE(message.contains("tool_calls"));
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
}

TEST_F(HttpChatTest, MalformedToolCallIsPlainContentAndToolChoiceNoneParsesNothing) {
  const std::string bad = "<tool_call>\n{\"name\": \"get_weather\", oops}\n</tool_call>";
  const json base = {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                     {"tools", {kWeatherTool}}};
  auto r = PostJson(*client_, "/v1/chat/completions", Says(bad, base));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body["choices"][0]["message"]["content"], bad);
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
  json none = Says(kCallingOutput, base);
  none["tool_choice"] = "none";
  r = PostJson(*client_, "/v1/chat/completions", none);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(r.body["choices"][0]["message"].contains("tool_calls"));
  EXPECT_NE(r.body["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>"),
            std::string::npos);
}

TEST_F(HttpChatTest, BadToolRequestsAre400NamingTheField) {
  const json messages = {{{"role", "user"}, {"content", "x"}}};
  auto r = PostJson(*client_, "/v1/chat/completions",
                    {{"messages", messages},
                     {"tools", {kWeatherTool}},
                     {"tool_choice", {{"type", "function"}, {"function", {{"name", "launch"}}}}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "tool_choice");
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("'launch'"), std::string::npos);
  json bad_tool = kWeatherTool;
  bad_tool["function"]["parameters"] = "a string";
  r = PostJson(*client_, "/v1/chat/completions", {{"messages", messages}, {"tools", {bad_tool}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "tools");
}

// A vocabulary with Qwen3's reasoning tags as tokens of their own (ids 259 and 260).
class HttpChatReasoningTokensTest : public HttpChatTest {
 protected:
  json TokenizerJson() const override {
    json tokenizer = testing::TinyTokenizerJson();
    for (const auto& [id, tag] : {std::pair{259, "<think>"}, std::pair{260, "</think>"}}) {
      tokenizer["added_tokens"].push_back({{"id", id},
                                           {"content", tag},
                                           {"single_word", false},
                                           {"lstrip", false},
                                           {"rstrip", false},
                                           {"normalized", false},
                                           {"special", false}});
      tokenizer["model"]["vocab"][tag] = id;
    }
    return tokenizer;
  }
};

// With --reasoning-parser, a constrained reply may think first: the engine gets the tags' tokens
// (the constraint takes the text after "</think>"), and the reply's reasoning comes back as
// reasoning_content, the object or the forced call's arguments after it.
TEST_F(HttpChatReasoningTokensTest, AConstrainedReplyMayThinkFirst) {
  const json messages = {{{"role", "user"}, {"content", "Paris?"}}};
  json body = Says("<think>\nJSON, then.\n</think>\n\n{\"city\": \"Paris\"}",
                   {{"messages", messages}, {"response_format", {{"type", "json_object"}}}});
  auto r = PostJson(*client_, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(backend_.last_request.sampling.json_output, nullptr);
  EXPECT_EQ(backend_.last_request.sampling.json_reasoning_open, 259);
  EXPECT_EQ(backend_.last_request.sampling.json_reasoning_close, 260);
  EXPECT_EQ(r.body["choices"][0]["message"]["reasoning_content"], "\nJSON, then.\n");
  EXPECT_EQ(r.body["choices"][0]["message"]["content"], "\n\n{\"city\": \"Paris\"}");

  body = Says("<think>\nA call.\n</think>\n\n{\"city\": \"Paris\"}",
              {{"messages", messages}, {"tools", {kWeatherTool}}});
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  r = PostJson(*client_, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(backend_.last_request.sampling.json_reasoning_open, 259);
  EXPECT_EQ(r.body["choices"][0]["message"]["reasoning_content"], "\nA call.\n");
  ExpectTheWeatherCall(r.body["choices"][0], "stop");

  // Continuing the final message: the object has begun, so there is no reasoning before it.
  body = Says("\"Paris\"}", {{"messages",
                              {{{"role", "user"}, {"content", "Paris?"}},
                               {{"role", "assistant"}, {"content", "{\"city\": "}}}},
                             {"response_format", {{"type", "json_object"}}},
                             {"add_generation_prompt", false},
                             {"continue_final_message", true}});
  r = PostJson(*client_, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(backend_.last_request.sampling.json_prefix, "{\"city\": ");
  EXPECT_EQ(backend_.last_request.sampling.json_reasoning_open, -1);
}

// A constrained output ends with an end-of-sequence token: ignore_eos without stop tokens is a
// 400 naming it and the constraint, before anything is queued.
TEST_F(HttpChatTest, IgnoreEosWithAConstraintIs400NamingBoth) {
  const json messages = {{{"role", "user"}, {"content", "Paris?"}}};
  json forced = {{"messages", messages},
                 {"tools", {kWeatherTool}},
                 {"ignore_eos", true},
                 {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}};
  auto r = PostJson(*client_, "/v1/chat/completions", forced);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.body["error"]["param"], "ignore_eos");
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("this tool_choice"),
            std::string::npos)
      << r.body;
  json object = {
      {"messages", messages}, {"ignore_eos", true}, {"response_format", {{"type", "json_object"}}}};
  r = PostJson(*client_, "/v1/chat/completions", object);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.body["error"]["param"], "ignore_eos");
  EXPECT_NE(r.body["error"]["message"].get<std::string>().find("this response_format"),
            std::string::npos)
      << r.body;
  // With a stop token to end it, the request goes through.
  object = Says("{}", object);
  object["stop_token_ids"] = {2};
  r = PostJson(*client_, "/v1/chat/completions", object);
  EXPECT_EQ(r.status, 200) << r.body;
}

// Without the tags in the vocabulary, the constraint holds from the first token.
TEST_F(HttpChatTest, WithoutReasoningTokensTheObjectComesFirst) {
  const json body = Says("{}", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                {"response_format", {{"type", "json_object"}}}});
  const auto r = PostJson(*client_, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(backend_.last_request.sampling.json_reasoning_open, -1);
  EXPECT_EQ(backend_.last_request.sampling.json_reasoning_close, -1);
}

class HttpChatGemmaTest : public HttpChatTest {
 protected:
  std::string TemplateFile() const override { return "gemma2.jinja"; }
};

TEST_F(HttpChatGemmaTest, ATemplateRefusalIs400WithItsMessage) {
  const auto r =
      PostJson(*client_, "/v1/chat/completions",
               {{"messages",
                 {{{"role", "system"}, {"content", "x"}}, {{"role", "user"}, {"content", "y"}}}}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.body["error"]["param"], "messages");
  EXPECT_EQ(r.body["error"]["message"],
            "chat template 'gemma2.jinja': the template raised: System role not supported");
}

}  // namespace
}  // namespace ridge
