// OpenAI request bodies: what is accepted, and every invalid field rejected with its name.
#include "server/openai_request.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/api_error.h"

namespace ridge {
namespace {

using nlohmann::json;

RequestLimits Limits() {
  RequestLimits limits;
  limits.vocab_size = 512;
  limits.max_new_tokens = 1000;
  limits.max_solver_iterations = 50;
  return limits;
}

// Whether `schema` takes all of `text` as one whole instance.
bool Takes(const JsonSchema& schema, const std::string& text) {
  JsonSchemaState state(&schema);
  for (char c : text) {
    if (!state.Step(static_cast<uint8_t>(c))) return false;
  }
  return state.complete();
}

TEST(OpenAiRequestTest, ParsesACompletionWithEveryField) {
  const json body = json::parse(R"({
    "model": "m", "prompt": "hello", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
    "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "presence_penalty": 0.5,
    "frequency_penalty": -0.5, "seed": 42, "stop": ["a", "bc"], "stop_token_ids": [5, 6],
    "logprobs": 3, "n": 1, "stream": true, "stream_options": {"include_usage": true},
    "ignore_eos": true, "min_tokens": 3, "solver_tolerance": 1e-3, "solver_max_iterations": 12, "timeout": 2.5,
    "user": "ignored", "some_future_field": {"x": 1}})");
  auto r = ParseOpenAiRequest(body, ApiKind::kCompletion, Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(r->prompts[0].text, "hello");
  EXPECT_EQ(r->sampling.max_tokens, 7);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.9f);
  EXPECT_EQ(r->sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r->sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r->sampling.repetition_penalty, 1.1f);
  EXPECT_FLOAT_EQ(r->sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r->sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(r->sampling.seed, 42u);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(r->sampling.stop_token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 3);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->sampling.ignore_eos);
  EXPECT_EQ(r->sampling.min_tokens, 3);
  EXPECT_FLOAT_EQ(*r->solver_tolerance, 1e-3f);
  EXPECT_EQ(*r->solver_max_iterations, 12);
  EXPECT_DOUBLE_EQ(*r->timeout_seconds, 2.5);
}

// min_tokens above the default max_tokens raises it (a request that names no max_tokens).
TEST(OpenAiRequestTest, MinTokensRaisesADefaultMaxTokens) {
  RequestLimits limits = Limits();
  limits.default_completion_max_tokens = 16;
  auto r = ParseOpenAiRequest(json::parse(R"({"prompt": "x", "min_tokens": 40})"),
                              ApiKind::kCompletion, limits);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->sampling.min_tokens, 40);
  EXPECT_EQ(r->sampling.max_tokens, 40);
  EXPECT_TRUE(r->max_tokens_defaulted);
}

TEST(OpenAiRequestTest, PromptForms) {
  for (const char* text : {R"({"prompt": [1, 2, 3]})", R"({"prompt": [[1, 2, 3]]})"}) {
    auto r = ParseOpenAiRequest(json::parse(text), ApiKind::kCompletion, Limits());
    ASSERT_TRUE(r.ok()) << text << ": " << r.status();
    ASSERT_EQ(r->prompts.size(), 1u);
    EXPECT_EQ(*r->prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  }
  auto r = ParseOpenAiRequest(json::parse(R"({"prompt": ["hi"]})"), ApiKind::kCompletion, Limits());
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(r->prompts[0].text, "hi");
  EXPECT_EQ(r->sampling.max_tokens, 16);  // OpenAI's default for completions
}

TEST(OpenAiRequestTest, APromptListIsSeveralPrompts) {
  auto r = ParseOpenAiRequest(json::parse(R"({"prompt": ["a", [4, 5], "b c"], "n": 2})"),
                              ApiKind::kCompletion, Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->prompts.size(), 3u);
  EXPECT_EQ(r->prompts[0].text, "a");
  EXPECT_EQ(*r->prompts[1].ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(r->prompts[2].text, "b c");
  EXPECT_EQ(r->n, 2);
  // 256 prompts is the most; 128 of them with n = 2 too.
  json many = {{"prompt", json::array()}};
  for (int i = 0; i < 128; ++i) many["prompt"].push_back("x");
  many["n"] = 2;
  EXPECT_TRUE(ParseOpenAiRequest(many, ApiKind::kCompletion, Limits()).ok());
  many["n"] = 3;
  auto too_many = ParseOpenAiRequest(many, ApiKind::kCompletion, Limits());
  EXPECT_EQ(ParamOf(too_many.status()), "n") << too_many.status();
}

TEST(OpenAiRequestTest, PromptLogprobs) {
  // OpenAI's echo with logprobs scores the prompt; vLLM's prompt_logprobs too, in its own list.
  auto r = ParseOpenAiRequest(json::parse(R"({"prompt": "x", "echo": true, "logprobs": 2})"),
                              ApiKind::kCompletion, Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->echo_logprobs);
  EXPECT_FALSE(r->prompt_logprobs.has_value());
  r = ParseOpenAiRequest(json::parse(R"({"messages": [{"role": "user", "content": "x"}],
                                         "prompt_logprobs": 0})"),
                         ApiKind::kChat, Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->echo_logprobs);
  EXPECT_EQ(r->prompt_logprobs, 0);
}

TEST(OpenAiRequestTest, ChatFields) {
  auto r = ParseOpenAiRequest(json::parse(R"({
      "messages": [{"role": "system", "content": "be brief"},
                   {"role": "user", "content": [{"type": "text", "text": "a"},
                                                {"type": "text", "text": "b"}]},
                   {"role": "assistant", "content": ""}],
      "max_tokens": 5, "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 2,
      "top_k": -1})"),
                              ApiKind::kChat, Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& messages = r->chat.render.messages;
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[1]["content"], "a\nb");  // text parts joined with newlines, as vLLM does
  EXPECT_EQ(messages[2]["content"], "");
  EXPECT_TRUE(r->chat.render.add_generation_prompt);
  EXPECT_FALSE(r->chat.has_tools);
  EXPECT_EQ(r->sampling.max_tokens, 9);  // max_completion_tokens wins
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->top_logprobs, 2);
  EXPECT_EQ(r->sampling.top_k, 0);
}

TEST(OpenAiRequestTest, ToolsToolCallsAndTemplateSwitches) {
  auto r = ParseOpenAiRequest(json::parse(R"({
      "messages": [{"role": "user", "content": "weather?"},
                   {"role": "assistant", "content": null, "reasoning_content": "look it up",
                    "tool_calls": [{"id": "call_1", "type": "function",
                                    "function": {"name": "get_weather",
                                                 "arguments": "{\"city\": \"Paris\"}"}}]},
                   {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}],
      "tools": [{"type": "function", "function": {"name": "get_weather",
                 "parameters": {"type": "object"}}}],
      "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
      "chat_template_kwargs": {"enable_thinking": false},
      "add_generation_prompt": false, "continue_final_message": true, "user": "someone"})"),
                              ApiKind::kChat, Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& messages = r->chat.render.messages;
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[1]["content"], "");  // null content of a tool-calling reply: empty
  EXPECT_EQ(messages[1]["reasoning_content"], "look it up");
  // JSON-string arguments reach the template as the object they hold.
  EXPECT_EQ(messages[1]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(messages[2]["tool_call_id"], "call_1");
  EXPECT_TRUE(r->chat.has_tools);
  EXPECT_EQ(r->chat.tool_choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(r->chat.tool_choice.function, "get_weather");
  // Its arguments are constrained to its parameters: an object without properties here.
  ASSERT_NE(r->tool_arguments, nullptr);
  EXPECT_EQ(r->tool_arguments->node(0).kind, JsonSchema::Kind::kObject);
  EXPECT_TRUE(r->tool_arguments->node(0).literals.empty());
  EXPECT_EQ(r->chat.render.kwargs["enable_thinking"], false);
  EXPECT_FALSE(r->chat.render.add_generation_prompt);
  EXPECT_TRUE(r->chat.render.continue_final_message);

  // Parameters absent or {}: no arguments ("{}"); tool_choice auto or none: no constraint.
  for (const char* parameters : {"", R"(, "parameters": {})"}) {
    for (const char* choice :
         {R"({"type": "function", "function": {"name": "f"}})", R"("auto")", R"("none")"}) {
      auto s = ParseOpenAiRequest(
          json::parse(absl::StrCat(R"({"messages": [{"role": "user", "content": "x"}],)",
                                   R"( "tools": [{"type": "function", "function": {"name": "f")",
                                   parameters, "}}], \"tool_choice\": ", choice, "}")),
          ApiKind::kChat, Limits());
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_EQ(s->tool_arguments != nullptr, choice[0] == '{') << parameters << choice;
      if (s->tool_arguments != nullptr) {
        EXPECT_TRUE(s->tool_arguments->node(0).literals.empty());
      }
    }
  }
  // Parameters the constraint cannot take: unconstrained unless the function is strict (400).
  for (const char* strict : {"", R"(, "strict": false)", R"(, "strict": true)"}) {
    auto s = ParseOpenAiRequest(
        json::parse(absl::StrCat(
            R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",)",
            R"( "function": {"name": "f", "parameters": {"type": "object", "properties": )",
            R"({"d": {"type": "string", "format": "date"}}})", strict,
            R"(}}], "tool_choice": {"type": "function", "function": {"name": "f"}}})")),
        ApiKind::kChat, Limits());
    if (std::string(strict).find("true") == std::string::npos) {
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_EQ(s->tool_arguments, nullptr);
      EXPECT_EQ(s->chat.tool_choice.mode, ToolChoice::Mode::kNamed);
    } else {
      ASSERT_FALSE(s.ok());
      EXPECT_EQ(ParamOf(s.status()), "tool_choice");
      EXPECT_NE(s.status().message().find("keyword \"format\""), std::string::npos) << s.status();
    }
  }
}

// tool_choice "required": a list of calls to the tools (at most one without parallel calls).
TEST(OpenAiRequestTest, RequiredToolChoiceIsAListOfCalls) {
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
          "properties": {"a": {"type": "integer"}}}}},
                   {"type": "function", "function": {"name": "g"}}])";
  auto parse = [&](const std::string& rest, const std::string& tool_list) {
    return ParseOpenAiRequest(
        json::parse(absl::StrCat(R"({"messages": [{"role": "user", "content": "x"}], )", tool_list,
                                 R"(, "tool_choice": "required")", rest, "}")),
        ApiKind::kChat, Limits());
  };
  auto r = parse("", tools);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chat.tool_choice.mode, ToolChoice::Mode::kRequired);
  ASSERT_NE(r->tool_arguments, nullptr);
  EXPECT_EQ(r->tool_arguments->node(0).kind, JsonSchema::Kind::kArray);
  EXPECT_EQ(r->tool_arguments->node(0).min_items, 1);
  EXPECT_EQ(r->tool_arguments->node(0).max_items, -1);
  r = parse(R"(, "parallel_tool_calls": false)", tools);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tool_arguments->node(0).max_items, 1);
  r = parse(R"(, "parallel_tool_calls": 1)", tools);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ParamOf(r.status()), "parallel_tool_calls");

  // A tool's own definitions and references (to them, and to its root) keep their meaning in the
  // list's schema: each call writes its own function's arguments.
  const std::string defined = absl::StrReplaceAll(
      tools, {{R"({"name": "g"})", R"({"name": "g", "parameters": {"type": "object",
          "properties": {"p": {"$ref": "#/$defs/P"}, "again": {"$ref": "#"}},
          "$defs": {"P": {"type": "object", "properties": {"q": {"$ref": "#/$defs/P"},
                                                          "n": {"type": "integer"}}}}}})"}});
  ASSERT_NE(defined, tools);
  auto with_defs = parse("", defined);
  ASSERT_TRUE(with_defs.ok()) << with_defs.status();
  auto accepts = [&](const std::string& text) { return Takes(*with_defs->tool_arguments, text); };
  // (This test's nlohmann::json sorts the keys: "again" comes before "p", "n" before "q".)
  EXPECT_TRUE(
      accepts(R"([{"name": "g", "arguments": {"again": {"p": {}}, "p": {"q": {"n": 1}}}}])"));
  EXPECT_TRUE(accepts(R"([{"name": "f", "arguments": {"a": 2}}, {"name": "g", "arguments": {}}])"));
  EXPECT_FALSE(accepts(R"([{"name": "g", "arguments": {"a": 2}}])"));
  EXPECT_FALSE(accepts(R"([{"name": "f", "arguments": {"p": {}}}])"));
  EXPECT_FALSE(accepts("[]"));

  // "$defs" and "definitions" with the same name stay two definitions.
  const std::string both = absl::StrReplaceAll(
      tools, {{R"({"name": "g"})", R"({"name": "g", "parameters": {"type": "object",
          "properties": {"a": {"$ref": "#/$defs/T"}, "b": {"$ref": "#/definitions/T"}},
          "required": ["a", "b"], "$defs": {"T": {"type": "string"}},
          "definitions": {"T": {"type": "integer"}}}})"}});
  auto with_both = parse("", both);
  ASSERT_TRUE(with_both.ok()) << with_both.status();
  auto both_accept = [&](const std::string& text) {
    return Takes(*with_both->tool_arguments, text);
  };
  EXPECT_TRUE(both_accept(R"([{"name": "g", "arguments": {"a": "s", "b": 2}}])"));
  EXPECT_FALSE(both_accept(R"([{"name": "g", "arguments": {"a": 1, "b": 2}}])"));

  const std::string twice = absl::StrReplaceAll(tools, {{R"("name": "g")", R"("name": "f")"}});
  auto refused = parse("", twice);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(ParamOf(refused.status()), "tool_choice");
  EXPECT_NE(refused.status().message().find("two are named 'f'"), std::string::npos)
      << refused.status();
}

TEST(OpenAiRequestTest, NamesTheBadElementOrRole) {
  auto r =
      ParseOpenAiRequest(json::parse(R"({"prompt": [1, 2.5]})"), ApiKind::kCompletion, Limits());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("prompt[1] must be an integer token id, got 2.5"),
            std::string::npos)
      << r.status();
  r = ParseOpenAiRequest(json::parse(R"({"messages": [{"role": "wizard", "content": "x"}]})"),
                         ApiKind::kChat, Limits());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("messages[0].role is 'wizard'"), std::string::npos)
      << r.status();
  // logit_bias is honoured: token ids as the object's keys.
  r = ParseOpenAiRequest(json::parse(R"({"prompt": "x", "logit_bias": {"5": 100, "7": -2.5}})"),
                         ApiKind::kCompletion, Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{5, 100.0f}, {7, -2.5f}}));
  // The neutral forms of the refused fields are accepted.
  r = ParseOpenAiRequest(json::parse(R"({"prompt": "x", "suffix": "", "logit_bias": {},
                                        "response_format": {"type": "text"}})"),
                         ApiKind::kCompletion, Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->json_object);
  // JSON mode, also beside tools the request says not to call.
  r = ParseOpenAiRequest(
      json::parse(R"({"prompt": "x", "response_format": {"type": "json_object"}})"),
      ApiKind::kCompletion, Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->json_object);
  r = ParseOpenAiRequest(json::parse(R"({"messages": [{"role": "user", "content": "x"}],
                                        "tools": [{"type": "function", "function": {"name": "f"}}],
                                        "tool_choice": "none",
                                        "response_format": {"type": "json_object"}})"),
                         ApiKind::kChat, Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->json_object);
  EXPECT_EQ(r->json_schema, nullptr);
  // A JSON schema, compiled; its refusals name the keyword and where it is.
  r = ParseOpenAiRequest(json::parse(R"({"prompt": "x", "response_format": {"type": "json_schema",
      "json_schema": {"name": "person-1_x", "strict": true, "description": "d",
                      "schema": {"type": "object", "properties": {"a": {"type": "string"}},
                                 "required": ["a"], "additionalProperties": false}}}})"),
                         ApiKind::kCompletion, Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->json_object);
  ASSERT_NE(r->json_schema, nullptr);
  EXPECT_EQ(r->json_schema->node(0).literals, std::vector<std::string>{"\"a\""});
  r = ParseOpenAiRequest(json::parse(R"({"prompt": "x", "response_format": {"type": "json_schema",
      "json_schema": {"name": "a", "schema": {"type": "object",
                      "properties": {"s": {"type": "string", "format": "date"}}}}}})"),
                         ApiKind::kCompletion, Limits());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("at #/properties/s: keyword \"format\" is not supported"),
            std::string::npos)
      << r.status();
}

TEST(OpenAiRequestTest, NullMeansAbsent) {
  auto r = ParseOpenAiRequest(
      json::parse(R"({"prompt": "x", "temperature": null, "stop": null, "n": null,
                      "stream_options": null, "seed": null})"),
      ApiKind::kCompletion, Limits());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FLOAT_EQ(r->sampling.temperature, 1.0f);
  EXPECT_FALSE(r->sampling.seed.has_value());
}

struct InvalidCase {
  ApiKind kind;
  const char* body;
  const char* param;  // expected "param"; "" for none
};

class InvalidBodyTest : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidBodyTest, IsRejectedNamingTheField) {
  const InvalidCase& c = GetParam();
  auto r = ParseOpenAiRequest(json::parse(c.body), c.kind, Limits());
  ASSERT_FALSE(r.ok()) << c.body;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
  EXPECT_EQ(HttpStatusFor(r.status()), 400);
  EXPECT_EQ(ParamOf(r.status()), c.param) << c.body << " -> " << r.status();
  if (*c.param != '\0') {
    // The message names the field so that it can be read without the param.
    EXPECT_NE(r.status().message().find(c.param), std::string::npos) << r.status();
  }
}

constexpr ApiKind kC = ApiKind::kCompletion;
constexpr ApiKind kChat = ApiKind::kChat;

INSTANTIATE_TEST_SUITE_P(
    Table, InvalidBodyTest,
    ::testing::Values(
        InvalidCase{kC, R"([1, 2])", ""}, InvalidCase{kC, R"({})", "prompt"},
        InvalidCase{kC, R"({"prompt": 5})", "prompt"},
        InvalidCase{kC, R"({"prompt": []})", "prompt"},
        InvalidCase{kC, R"({"prompt": ["a", 5]})", "prompt"},
        InvalidCase{kC, R"({"prompt": ["a", []]})", "prompt"},
        InvalidCase{kC, R"({"prompt": [[1], [1, "a"]]})", "prompt"},
        InvalidCase{kC, R"({"prompt": [1, 512]})", "prompt"},
        InvalidCase{kC, R"({"prompt": [1, -1]})", "prompt"},
        InvalidCase{kC, R"({"prompt": [1, "a"]})", "prompt"},
        InvalidCase{kC, R"({"prompt": [1, 2.5]})", "prompt"},
        InvalidCase{kC, R"({"prompt": "x", "suffix": "y"})", "suffix"},
        InvalidCase{kC, R"({"prompt": "x", "logit_bias": {"5": 101}})", "logit_bias"},
        InvalidCase{kC, R"({"prompt": "x", "logit_bias": {"a": 1}})", "logit_bias"},
        InvalidCase{kC, R"({"prompt": "x", "logit_bias": {"512": 1}})", "logit_bias"},
        InvalidCase{kC, R"({"prompt": "x", "logit_bias": [1]})", "logit_bias"},
        InvalidCase{kC, R"({"prompt": "x", "logit_bias": {"5": "1"}})", "logit_bias"},
        InvalidCase{kC, R"({"prompt": "x", "response_format": {"type": "json_schema"}})",
                    "response_format.json_schema"},
        InvalidCase{kC, R"({"prompt": "x", "response_format": {"type": "json_schema",
                              "json_schema": {"schema": {"type": "object"}}}})",
                    "response_format.json_schema.name"},
        InvalidCase{kC, R"({"prompt": "x", "response_format": {"type": "json_schema",
                              "json_schema": {"name": "a b", "schema": {"type": "object"}}}})",
                    "response_format.json_schema.name"},
        InvalidCase{kC, R"({"prompt": "x", "response_format": {"type": "json_schema",
                              "json_schema": {"name": "a", "strict": "yes",
                                              "schema": {"type": "object"}}}})",
                    "response_format.json_schema.strict"},
        InvalidCase{kC, R"({"prompt": "x", "response_format": {"type": "json_schema",
                              "json_schema": {"name": "a"}}})",
                    "response_format.json_schema.schema"},
        InvalidCase{kC, R"({"prompt": "x", "response_format": {"type": "json_schema",
                              "json_schema": {"name": "a", "schema": {"type": "object",
                                "properties": {"s": {"type": "string", "pattern": "a+"}}}}}})",
                    "response_format.json_schema.schema"},
        InvalidCase{kChat, R"({"messages": [{"role": "user", "content": "x"}],
                              "tools": [{"type": "function", "function": {"name": "f"}}],
                              "response_format": {"type": "json_schema", "json_schema": {
                                "name": "a", "schema": {"type": "object"}}}})",
                    "response_format"},
        InvalidCase{kC, R"({"prompt": "x", "response_format": {"type": "yaml"}})",
                    "response_format"},
        InvalidCase{kC, R"({"prompt": "x", "response_format": "json_object"})", "response_format"},
        InvalidCase{kChat, R"({"messages": [{"role": "user", "content": "x"}],
                              "tools": [{"type": "function", "function": {"name": "f"}}],
                              "response_format": {"type": "json_object"}})",
                    "response_format"},
        InvalidCase{kC, R"({"prompt": "x", "model": 3})", "model"},
        InvalidCase{kC, R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
        InvalidCase{kC, R"({"prompt": "x", "max_tokens": 1001})", "max_tokens"},
        InvalidCase{kC, R"({"prompt": "x", "max_tokens": 2.5})", "max_tokens"},
        InvalidCase{kC, R"({"prompt": "x", "max_tokens": "5"})", "max_tokens"},
        InvalidCase{kC, R"({"prompt": "x", "temperature": -0.1})", "temperature"},
        InvalidCase{kC, R"({"prompt": "x", "temperature": 2.5})", "temperature"},
        InvalidCase{kC, R"({"prompt": "x", "temperature": "hot"})", "temperature"},
        InvalidCase{kC, R"({"prompt": "x", "top_p": 0})", "top_p"},
        InvalidCase{kC, R"({"prompt": "x", "top_p": 1.5})", "top_p"},
        InvalidCase{kC, R"({"prompt": "x", "top_k": -2})", "top_k"},
        InvalidCase{kC, R"({"prompt": "x", "top_k": 1.5})", "top_k"},
        InvalidCase{kC, R"({"prompt": "x", "min_p": 1.5})", "min_p"},
        InvalidCase{kC, R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
        InvalidCase{kC, R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
        InvalidCase{kC, R"({"prompt": "x", "frequency_penalty": -3})", "frequency_penalty"},
        InvalidCase{kC, R"({"prompt": "x", "seed": "1"})", "seed"},
        InvalidCase{kC, R"({"prompt": "x", "seed": 1.5})", "seed"},
        InvalidCase{kC, R"({"prompt": "x", "stop": 3})", "stop"},
        InvalidCase{kC, R"({"prompt": "x", "stop": ""})", "stop"},
        InvalidCase{kC, R"({"prompt": "x", "stop": ["a", 1]})", "stop"},
        InvalidCase{kC, R"({"prompt": "x", "stop": ["1","2","3","4","5","6","7","8","9","10",
                                                   "11","12","13","14","15","16","17"]})",
                    "stop"},
        InvalidCase{kC, R"({"prompt": "x", "stop_token_ids": [600]})", "stop_token_ids"},
        InvalidCase{kC, R"({"prompt": "x", "stop_token_ids": 5})", "stop_token_ids"},
        InvalidCase{kC, R"({"prompt": "x", "logprobs": 21})", "logprobs"},
        InvalidCase{kC, R"({"prompt": "x", "logprobs": true})", "logprobs"},
        InvalidCase{kC, R"({"prompt": "x", "n": 0})", "n"},
        InvalidCase{kC, R"({"prompt": "x", "n": 17})", "n"},
        InvalidCase{kC, R"({"prompt": "x", "best_of": 3})", "best_of"},
        InvalidCase{kC, R"({"prompt": "x", "echo": true, "logprobs": 1, "session_id": "s"})",
                    "echo"},
        InvalidCase{kC, R"({"prompt": "x", "prompt_logprobs": 21})", "prompt_logprobs"},
        InvalidCase{kC, R"({"prompt": "x", "prompt_logprobs": -1})", "prompt_logprobs"},
        InvalidCase{kC, R"({"prompt": "x", "prompt_logprobs": 1, "stream": true})",
                    "prompt_logprobs"},
        InvalidCase{kC, R"({"prompt": "x", "prompt_logprobs": 1, "session_id": "s"})",
                    "prompt_logprobs"},
        InvalidCase{kC, R"({"prompt": "x", "stream": "yes"})", "stream"},
        InvalidCase{kC, R"({"prompt": "x", "stream_options": {"include_usage": true}})",
                    "stream_options"},
        InvalidCase{kC, R"({"prompt": "x", "stream": true, "stream_options": 1})",
                    "stream_options"},
        InvalidCase{kC, R"({"prompt": "x", "stream": true,
                            "stream_options": {"include_usage": 1}})",
                    "stream_options"},
        InvalidCase{kC, R"({"prompt": "x", "ignore_eos": 1})", "ignore_eos"},
        InvalidCase{kC, R"({"prompt": "x", "min_tokens": -1})", "min_tokens"},
        InvalidCase{kC, R"({"prompt": "x", "min_tokens": 1.5})", "min_tokens"},
        InvalidCase{kC, R"({"prompt": "x", "max_tokens": 4, "min_tokens": 5})", "min_tokens"},
        InvalidCase{kChat, R"({"messages": [{"role": "user", "content": "x"}],
                               "max_completion_tokens": 2, "min_tokens": 3})",
                    "min_tokens"},
        InvalidCase{kC, R"({"prompt": "x", "solver_tolerance": 2})", "solver_tolerance"},
        InvalidCase{kC, R"({"prompt": "x", "solver_tolerance": -1e-3})", "solver_tolerance"},
        InvalidCase{kC, R"({"prompt": "x", "solver_max_iterations": 0})", "solver_max_iterations"},
        InvalidCase{kC, R"({"prompt": "x", "solver_max_iterations": 51})", "solver_max_iterations"},
        InvalidCase{kC, R"({"prompt": "x", "timeout": 0})", "timeout"},
        InvalidCase{kChat, R"({"prompt": "x"})", "messages"},
        InvalidCase{kChat, R"({"messages": []})", "messages"},
        InvalidCase{kChat, R"({"messages": [{"content": "x"}]})", "messages"},
        InvalidCase{kChat, R"({"messages": [{"role": "user", "content": 5}]})", "messages"},
        InvalidCase{kChat, R"({"messages": [{"role": "user", "content": null}]})", "messages"},
        InvalidCase{kChat, R"({"messages": [{"role": "user"}]})", "messages"},
        InvalidCase{kChat, R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages"},
        InvalidCase{kChat,
                    R"({"messages": [{"role": "user", "content": "x"}],
                        "tools": [{"type": "function"}]})",
                    "tools"},
        InvalidCase{kChat,
                    R"({"messages": [{"role": "user", "content": "x"}],
                        "tools": [{"type": "function", "function": {"name": "f",
                                                                    "parameters": "string"}}]})",
                    "tools"},
        InvalidCase{kChat,
                    R"({"messages": [{"role": "user", "content": "x"}],
                        "tools": [{"type": "function", "function": {"name": "f"}}],
                        "tool_choice": {"type": "function", "function": {"name": "g"}}})",
                    "tool_choice"},
        InvalidCase{kChat,
                    R"({"messages": [{"role": "user", "content": "x"}],
                        "tool_choice": "required"})",
                    "tool_choice"},
        InvalidCase{kChat,
                    R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function",
                        "function": {"name": "f", "arguments": "{not json"}}]}]})",
                    "messages"},
        InvalidCase{kChat, R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})",
                    "messages"},
        InvalidCase{kChat, R"({"messages": [{"role": "tool"}]})", "messages"},
        InvalidCase{kChat,
                    R"({"messages": [{"role": "user", "content": "x"}],
                        "chat_template_kwargs": [1]})",
                    "chat_template_kwargs"},
        InvalidCase{kChat,
                    R"({"messages": [{"role": "user", "content": "x"}],
                        "continue_final_message": true})",
                    "continue_final_message"},
        InvalidCase{kChat,
                    R"({"messages": [{"role": "user", "content": "x"}], "chat_template": "{{x}}"})",
                    "chat_template"},
        InvalidCase{kChat,
                    R"({"messages": [{"role": "user",
                                      "content": [{"type": "image_url", "image_url": {}}]}]})",
                    "messages"},
        InvalidCase{kChat, R"({"messages": [{"role": "user", "content": "x"}], "n": 1.5})", "n"},
        InvalidCase{kChat, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})",
                    "logprobs"},
        InvalidCase{kChat, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
                    "top_logprobs"},
        InvalidCase{kChat,
                    R"({"messages": [{"role": "user", "content": "x"}],
                        "max_completion_tokens": 0})",
                    "max_completion_tokens"}));

}  // namespace
}  // namespace ridge
