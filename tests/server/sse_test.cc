// SSE framing and the OpenAI chunk / response shapes.
#include "server/sse.h"

#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/openai_response.h"

namespace ridge {
namespace {

using json = nlohmann::ordered_json;

TEST(SseTest, EventIsOneDataLineAndABlankLine) {
  EXPECT_EQ(SseEvent(json{{"a", "x\ny"}}), "data: {\"a\":\"x\\ny\"}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(SseTest, ParserHandlesSplitsCommentsAndCrLf) {
  SseParser parser;
  std::vector<std::string> all;
  const std::string stream =
      ": keep-alive\n\ndata: {\"i\":1}\n\ndata: {\"i\":2}\r\n\r\nevent: x\ndata: a\ndata: b\n\n" +
      std::string(kSseDone);
  for (char c : stream) {  // one byte at a time
    for (auto& e : parser.Feed(std::string_view(&c, 1))) all.push_back(e);
  }
  EXPECT_EQ(all, (std::vector<std::string>{"{\"i\":1}", "{\"i\":2}", "a\nb", "[DONE]"}));
}

ResponseBuilder::Options Options(ApiKind kind) {
  ResponseBuilder::Options o;
  o.kind = kind;
  o.id = "cmpl-1";
  o.created = 123;
  o.model = "tiny";
  return o;
}

TEST(ResponseBuilderTest, CompletionChunkHasOpenAiShape) {
  ResponseBuilder b(Options(ApiKind::kCompletion));
  OutputDelta d;
  d.text = "hi";
  const json chunk = b.Chunk(d);
  EXPECT_EQ(chunk["id"], "cmpl-1");
  EXPECT_EQ(chunk["object"], "text_completion");
  EXPECT_EQ(chunk["created"], 123);
  EXPECT_EQ(chunk["model"], "tiny");
  ASSERT_EQ(chunk["choices"].size(), 1u);
  EXPECT_EQ(chunk["choices"][0]["index"], 0);
  EXPECT_EQ(chunk["choices"][0]["text"], "hi");
  EXPECT_TRUE(chunk["choices"][0]["logprobs"].is_null());
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(chunk.contains("usage"));
  const json last = b.FinalChunk("length");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["choices"][0]["text"], "");
}

TEST(ResponseBuilderTest, ChatChunksCarryTheRoleOnceAndUsageComesLast) {
  auto o = Options(ApiKind::kChat);
  o.include_usage = true;
  ResponseBuilder b(o);
  OutputDelta d;
  d.text = "a";
  json first = b.Chunk(d), second = b.Chunk(d);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", "a"}}));
  EXPECT_EQ(second["choices"][0]["delta"], (json{{"content", "a"}}));
  EXPECT_TRUE(first.contains("usage") && first["usage"].is_null());
  EXPECT_EQ(b.FinalChunk("stop")["choices"][0]["delta"], json::object());
  RequestUsage usage;
  usage.decode_solver.Add({10, 1e-3f, false});
  usage.decode_solver.Add({30, 1e-2f, true});
  const json u = b.UsageChunk(UsageJson(4, 2, usage));
  EXPECT_EQ(u["choices"], json::array());
  EXPECT_EQ(u["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(u["usage"]["completion_tokens"], 2);
  EXPECT_EQ(u["usage"]["total_tokens"], 6);
  EXPECT_EQ(u["usage"]["solver"]["decode"]["solves"], 2);
  EXPECT_DOUBLE_EQ(u["usage"]["solver"]["decode"]["mean_iterations"].get<double>(), 20.0);
  EXPECT_EQ(u["usage"]["solver"]["decode"]["max_iterations"], 30);
  EXPECT_DOUBLE_EQ(u["usage"]["solver"]["decode"]["capped_fraction"].get<double>(), 0.5);
  EXPECT_EQ(u["usage"]["solver"]["prefill"]["solves"], 0);
}

TEST(ResponseBuilderTest, FullResponsesAndLogprobs) {
  auto o = Options(ApiKind::kCompletion);
  o.logprobs = true;
  ResponseBuilder b(o);
  OutputDelta all;
  all.text = "xy";
  all.tokens = {7, 8};
  all.logprobs = {{7, -0.5f, {{7, -0.5f}, {9, -1.0f}}}, {8, -0.25f, {{8, -0.25f}}}};
  const json r = b.Full(all, "stop", UsageJson(1, 2, RequestUsage{}));
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["text"], "xy");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  const json& lp = r["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], (json{"token_id:7", "token_id:8"}));
  EXPECT_EQ(lp["token_logprobs"], (json{-0.5, -0.25}));
  EXPECT_EQ(lp["top_logprobs"][0]["token_id:9"], -1.0);
  EXPECT_EQ(lp["text_offset"], (json{0, 10}));

  auto co = Options(ApiKind::kChat);
  co.logprobs = true;
  ResponseBuilder chat(co);
  const json c = chat.Full(all, "length", UsageJson(1, 2, RequestUsage{}));
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["choices"][0]["message"], (json{{"role", "assistant"}, {"content", "xy"}}));
  EXPECT_EQ(c["choices"][0]["logprobs"]["content"][0]["token"], "token_id:7");
  EXPECT_EQ(c["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["logprob"], -1.0);
}

TEST(ApiErrorTest, BodiesAndStatusCodes) {
  const absl::Status s = FieldError("top_p", "must be in (0, 1], got 2");
  EXPECT_EQ(ErrorBody(s), json::parse(R"({"error": {"message": "top_p must be in (0, 1], got 2",
      "type": "invalid_request_error", "param": "top_p", "code": "invalid_value"}})"));
  EXPECT_EQ(HttpStatusFor(absl::NotFoundError("")), 404);
  EXPECT_EQ(HttpStatusFor(absl::OutOfRangeError("")), 413);
  EXPECT_EQ(HttpStatusFor(absl::ResourceExhaustedError("")), 429);
  EXPECT_EQ(HttpStatusFor(absl::UnavailableError("")), 503);
  EXPECT_EQ(ParamOf(WithParamFromMessage(absl::InvalidArgumentError("max_tokens: too many"))),
            "max_tokens");
  EXPECT_EQ(ParamOf(WithParamFromMessage(absl::InvalidArgumentError("prompt[3]: bad id"))),
            "prompt");
  EXPECT_EQ(ParamOf(WithParamFromMessage(absl::InvalidArgumentError("solver tolerance 3: no"))),
            "");
  EXPECT_TRUE(ErrorBody(absl::InternalError("x"))["error"]["param"].is_null());
}

}  // namespace
}  // namespace ridge
