// GenerateRequest -> EngineRequest validation, and engine events -> GenerateResponse
// (incremental text, stop strings, finish reasons, usage).
#include "server/grpc_conversion.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tests/support/tiny_tokenizer.h"
#include "tokenizer/utf8.h"

namespace ridge {
namespace {

class GrpcConversionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto tokenizer = testing::LoadTinyTokenizer(RIDGE_TEST_DATA_DIR);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = std::move(*tokenizer).release();
  }

  ServedModel Model(bool with_tokenizer) const {
    ServedModel m;
    m.name = "tiny";
    m.vocab_size = 512;
    m.tokenizer = with_tokenizer ? tokenizer_ : nullptr;
    if (with_tokenizer) m.json_vocabulary = std::make_shared<LazyJsonVocabulary>(tokenizer_, 512);
    m.limits.max_prompt_tokens = 8;
    m.limits.max_new_tokens = 100;
    m.limits.max_solver_iterations = 50;
    m.limits.default_solver = SolverOptions{1e-3f, 20};
    return m;
  }

  static v1::GenerateRequest IdsRequest(std::vector<int32_t> ids) {
    v1::GenerateRequest r;
    for (int32_t id : ids) r.mutable_token_ids()->add_ids(id);
    return r;
  }

  static const Tokenizer* tokenizer_;
};
const Tokenizer* GrpcConversionTest::tokenizer_ = nullptr;

struct InvalidCase {
  const char* name;
  std::function<void(v1::GenerateRequest*)> edit;
  absl::StatusCode code;
  const char* message;  // a substring the message must contain
  bool with_tokenizer = true;
};

TEST_F(GrpcConversionTest, InvalidRequestsNameTheField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<InvalidCase> cases = {
      {"no prompt", [](auto* r) { r->clear_prompt(); }, absl::StatusCode::kInvalidArgument,
       "prompt is not set"},
      {"logit bias out of range",
       [](auto* r) { (*r->mutable_sampling()->mutable_logit_bias())[3] = 150.0f; },
       absl::StatusCode::kInvalidArgument, "logit_bias: the bias of token 3"},
      {"logit bias outside the vocabulary",
       [](auto* r) { (*r->mutable_sampling()->mutable_logit_bias())[600] = 1.0f; },
       absl::StatusCode::kInvalidArgument, "logit_bias: token id 600"},
      {"bad session id", [](auto* r) { r->set_session_id("a/b"); },
       absl::StatusCode::kInvalidArgument, "session_id 'a/b'"},
      {"prompt logprobs out of range", [](auto* r) { r->set_prompt_logprobs(21); },
       absl::StatusCode::kInvalidArgument, "prompt_logprobs must be in [0, 20], got 21"},
      {"prompt logprobs with a session",
       [](auto* r) {
         r->set_prompt_logprobs(0);
         r->set_session_id("s");
       },
       absl::StatusCode::kInvalidArgument, "prompt_logprobs cannot be combined with session_id"},
      {"empty ids", [](auto* r) { r->mutable_token_ids()->clear_ids(); },
       absl::StatusCode::kInvalidArgument, "token_ids.ids is empty"},
      {"id too large", [](auto* r) { r->mutable_token_ids()->add_ids(512); },
       absl::StatusCode::kInvalidArgument, "token_ids.ids[3] = 512 is outside the vocabulary"},
      {"negative id", [](auto* r) { r->mutable_token_ids()->set_ids(0, -1); },
       absl::StatusCode::kInvalidArgument, "token_ids.ids[0] = -1"},
      {"prompt too long",
       [](auto* r) {
         for (int i = 0; i < 6; ++i) r->mutable_token_ids()->add_ids(7);
       },
       absl::StatusCode::kOutOfRange, "the prompt has 9 tokens; this server accepts at most 8"},
      {"empty text", [](auto* r) { r->set_text(""); }, absl::StatusCode::kInvalidArgument,
       "text encodes to no tokens"},
      {"text without tokenizer", [](auto* r) { r->set_text("hi"); },
       absl::StatusCode::kFailedPrecondition, "text prompts need a tokenizer", false},
      {"stop without tokenizer", [](auto* r) { r->mutable_sampling()->add_stop(std::string("x")); },
       absl::StatusCode::kFailedPrecondition, "stop strings need a tokenizer", false},
      {"other model", [](auto* r) { r->set_model("big"); }, absl::StatusCode::kNotFound,
       "model 'big' is not served here; this server serves 'tiny'"},
      {"max_tokens 0", [](auto* r) { r->mutable_sampling()->set_max_tokens(0); },
       absl::StatusCode::kInvalidArgument, "sampling.max_tokens must be in [1, 100], got 0"},
      {"max_tokens over limit", [](auto* r) { r->mutable_sampling()->set_max_tokens(101); },
       absl::StatusCode::kInvalidArgument, "sampling.max_tokens"},
      {"min_tokens over max_tokens",
       [](auto* r) {
         r->mutable_sampling()->set_max_tokens(4);
         r->mutable_sampling()->set_min_tokens(5);
       },
       absl::StatusCode::kInvalidArgument,
       "sampling.min_tokens must be in [0, max_tokens = 4], got 5"},
      {"min_tokens over the limit", [](auto* r) { r->mutable_sampling()->set_min_tokens(101); },
       absl::StatusCode::kInvalidArgument,
       "sampling.min_tokens must be in [0, max_new_tokens = 100], got 101"},
      {"negative min_tokens", [](auto* r) { r->mutable_sampling()->set_min_tokens(-1); },
       absl::StatusCode::kInvalidArgument, "sampling.min_tokens"},
      {"negative temperature", [](auto* r) { r->mutable_sampling()->set_temperature(-1); },
       absl::StatusCode::kInvalidArgument, "temperature"},
      {"NaN temperature", [nan](auto* r) { r->mutable_sampling()->set_temperature(nan); },
       absl::StatusCode::kInvalidArgument, "temperature"},
      {"top_p 1.5", [](auto* r) { r->mutable_sampling()->set_top_p(1.5f); },
       absl::StatusCode::kInvalidArgument, "top_p"},
      {"top_p 0", [](auto* r) { r->mutable_sampling()->set_top_p(0.0f); },
       absl::StatusCode::kInvalidArgument, "top_p"},
      {"negative top_k", [](auto* r) { r->mutable_sampling()->set_top_k(-2); },
       absl::StatusCode::kInvalidArgument, "top_k"},
      {"min_p 2", [](auto* r) { r->mutable_sampling()->set_min_p(2); },
       absl::StatusCode::kInvalidArgument, "min_p"},
      {"repetition_penalty 0", [](auto* r) { r->mutable_sampling()->set_repetition_penalty(0); },
       absl::StatusCode::kInvalidArgument, "repetition_penalty"},
      {"presence_penalty 3", [](auto* r) { r->mutable_sampling()->set_presence_penalty(3); },
       absl::StatusCode::kInvalidArgument, "presence_penalty"},
      {"frequency_penalty -3", [](auto* r) { r->mutable_sampling()->set_frequency_penalty(-3); },
       absl::StatusCode::kInvalidArgument, "frequency_penalty"},
      {"stop id outside vocab", [](auto* r) { r->mutable_sampling()->add_stop_token_ids(600); },
       absl::StatusCode::kInvalidArgument, "stop_token_ids[0]"},
      {"empty stop string", [](auto* r) { r->mutable_sampling()->add_stop(std::string("")); },
       absl::StatusCode::kInvalidArgument, "sampling.stop[0] must be 1 to 256 bytes, got 0"},
      {"long stop string",
       [](auto* r) {
         r->mutable_sampling()->add_stop(std::string("a"));
         r->mutable_sampling()->add_stop(std::string(257, 'x'));
       },
       absl::StatusCode::kInvalidArgument, "sampling.stop[1] must be 1 to 256 bytes, got 257"},
      {"too many stop strings",
       [](auto* r) {
         for (int i = 0; i < 17; ++i) r->mutable_sampling()->add_stop(std::string("s"));
       },
       absl::StatusCode::kInvalidArgument, "sampling.stop has 17 strings; at most 16"},
      {"top_logprobs 21", [](auto* r) { r->mutable_sampling()->set_top_logprobs(21); },
       absl::StatusCode::kInvalidArgument, "sampling.top_logprobs must be in [0, 20], got 21"},
      {"negative top_logprobs", [](auto* r) { r->mutable_sampling()->set_top_logprobs(-1); },
       absl::StatusCode::kInvalidArgument, "sampling.top_logprobs"},
      {"tolerance 2", [](auto* r) { r->mutable_solver()->set_tolerance(2); },
       absl::StatusCode::kInvalidArgument, "solver.tolerance must be in [0, 1], got 2"},
      {"NaN tolerance", [nan](auto* r) { r->mutable_solver()->set_tolerance(nan); },
       absl::StatusCode::kInvalidArgument, "solver.tolerance"},
      {"max_iterations 0", [](auto* r) { r->mutable_solver()->set_max_iterations(0); },
       absl::StatusCode::kInvalidArgument, "solver.max_iterations must be in [1, 50], got 0"},
      {"max_iterations 51", [](auto* r) { r->mutable_solver()->set_max_iterations(51); },
       absl::StatusCode::kInvalidArgument, "solver.max_iterations"},
      {"JSON mode without a tokenizer",
       [](auto* r) { r->mutable_sampling()->set_json_object(true); },
       absl::StatusCode::kFailedPrecondition, "sampling.json_object needs a tokenizer",
       /*with_tokenizer=*/false},
      {"a schema without a tokenizer",
       [](auto* r) { r->mutable_sampling()->set_json_schema(R"({"type": "object"})"); },
       absl::StatusCode::kFailedPrecondition, "sampling.json_schema needs a tokenizer",
       /*with_tokenizer=*/false},
      {"a schema that is not JSON", [](auto* r) { r->mutable_sampling()->set_json_schema("{"); },
       absl::StatusCode::kInvalidArgument, "sampling.json_schema: the schema is not JSON"},
      {"a schema keyword not implemented",
       [](auto* r) {
         r->mutable_sampling()->set_json_schema(
             R"({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}})");
       },
       absl::StatusCode::kInvalidArgument,
       "sampling.json_schema: at #/properties/n: keyword \"minimum\" is not supported"},
      {"json_object and a schema",
       [](auto* r) {
         r->mutable_sampling()->set_json_object(true);
         r->mutable_sampling()->set_json_schema(R"({"type": "object"})");
       },
       absl::StatusCode::kInvalidArgument, "exclude each other"},
  };
  for (const InvalidCase& c : cases) {
    v1::GenerateRequest request = IdsRequest({1, 2, 3});
    c.edit(&request);
    absl::StatusOr<ParsedGenerateRequest> parsed =
        ParseGenerateRequest(request, Model(c.with_tokenizer));
    ASSERT_FALSE(parsed.ok()) << c.name;
    EXPECT_EQ(parsed.status().code(), c.code) << c.name << ": " << parsed.status();
    EXPECT_NE(parsed.status().message().find(c.message), absl::string_view::npos)
        << c.name << ": " << parsed.status();
  }
}

TEST_F(GrpcConversionTest, DefaultsMatchTheEngine) {
  absl::StatusOr<ParsedGenerateRequest> parsed =
      ParseGenerateRequest(IdsRequest({1, 2, 3}), Model(false));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const EngineRequest& e = parsed->engine;
  EXPECT_EQ(e.prompt, (std::vector<int32_t>{1, 2, 3}));
  const SamplingParams defaults;
  EXPECT_EQ(e.sampling.max_tokens, defaults.max_tokens);
  EXPECT_EQ(e.sampling.temperature, defaults.temperature);
  EXPECT_EQ(e.sampling.top_p, defaults.top_p);
  EXPECT_EQ(e.sampling.repetition_penalty, defaults.repetition_penalty);
  EXPECT_FALSE(e.sampling.seed.has_value());
  EXPECT_FALSE(e.solver.has_value());
  EXPECT_FALSE(e.logprobs);
  EXPECT_EQ(e.top_logprobs, 0);
  EXPECT_EQ(e.prompt_logprobs, -1);
  EXPECT_FALSE(e.deadline.has_value());
  EXPECT_TRUE(parsed->stop.empty());
  EXPECT_TRUE(parsed->skip_special_tokens);
}

TEST_F(GrpcConversionTest, EveryFieldIsCarried) {
  v1::GenerateRequest r = IdsRequest({5});
  r.set_model("tiny");
  v1::SamplingParams* s = r.mutable_sampling();
  s->set_max_tokens(7);
  s->set_temperature(0.0f);  // explicit zero: greedy, not the default
  s->set_top_p(0.9f);
  s->set_top_k(40);
  s->set_min_p(0.05f);
  s->set_repetition_penalty(1.1f);
  s->set_presence_penalty(0.5f);
  s->set_frequency_penalty(-0.5f);
  s->set_seed(0);  // explicit zero seed
  s->add_stop(std::string("\n\n"));
  s->add_stop_token_ids(9);
  s->set_ignore_eos(true);
  s->set_min_tokens(2);
  s->set_top_logprobs(3);
  (*s->mutable_logit_bias())[11] = -100.0f;
  (*s->mutable_logit_bias())[4] = 2.5f;
  r.set_cache_salt("tenant");
  r.set_session_id("chat-1");
  r.mutable_solver()->set_max_iterations(12);  // tolerance from the default budget
  r.set_skip_special_tokens(false);
  absl::StatusOr<ParsedGenerateRequest> parsed = ParseGenerateRequest(r, Model(true));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const EngineRequest& e = parsed->engine;
  EXPECT_EQ(e.sampling.max_tokens, 7);
  EXPECT_EQ(e.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(e.sampling.top_p, 0.9f);
  EXPECT_EQ(e.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(e.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(e.sampling.repetition_penalty, 1.1f);
  EXPECT_FLOAT_EQ(e.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(e.sampling.frequency_penalty, -0.5f);
  ASSERT_TRUE(e.sampling.seed.has_value());
  EXPECT_EQ(*e.sampling.seed, 0u);
  EXPECT_EQ(e.sampling.stop_token_ids, std::vector<int32_t>{9});
  EXPECT_TRUE(e.sampling.ignore_eos);
  EXPECT_EQ(e.sampling.min_tokens, 2);
  EXPECT_TRUE(e.logprobs);  // implied by top_logprobs
  EXPECT_EQ(e.top_logprobs, 3);
  EXPECT_EQ(e.sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{4, 2.5f}, {11, -100.0f}}));
  EXPECT_EQ(e.cache_salt, "tenant");
  EXPECT_EQ(e.session_id, "chat-1");
  ASSERT_TRUE(e.solver.has_value());
  EXPECT_FLOAT_EQ(e.solver->tolerance, 1e-3f);
  EXPECT_EQ(e.solver->max_iterations, 12);
  EXPECT_EQ(parsed->stop, std::vector<std::string>{"\n\n"});
  EXPECT_FALSE(parsed->skip_special_tokens);
}

// min_tokens above an unset max_tokens's default raises it, as over HTTP.
TEST_F(GrpcConversionTest, MinTokensRaisesADefaultMaxTokens) {
  v1::GenerateRequest r = IdsRequest({5});
  r.mutable_sampling()->set_min_tokens(40);
  absl::StatusOr<ParsedGenerateRequest> parsed = ParseGenerateRequest(r, Model(true));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->engine.sampling.min_tokens, 40);
  EXPECT_EQ(parsed->engine.sampling.max_tokens, 40);
  EXPECT_TRUE(parsed->engine.max_tokens_defaulted);
}

TEST_F(GrpcConversionTest, JsonObjectConstrainsTheSampling) {
  v1::GenerateRequest r = IdsRequest({1, 2, 3});
  absl::StatusOr<ParsedGenerateRequest> plain = ParseGenerateRequest(r, Model(true));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->engine.sampling.json_output, nullptr);
  r.mutable_sampling()->set_json_object(true);
  absl::StatusOr<ParsedGenerateRequest> json = ParseGenerateRequest(r, Model(true));
  ASSERT_TRUE(json.ok()) << json.status();
  ASSERT_NE(json->engine.sampling.json_output, nullptr);
  EXPECT_EQ(json->engine.sampling.json_output->vocab_size(), 512);
  EXPECT_EQ(json->engine.sampling.json_schema, nullptr);
  // A schema: compiled, its keys in the text's order (the output's).
  r.mutable_sampling()->set_json_object(false);
  r.mutable_sampling()->set_json_schema(
      R"({"type": "object", "properties": {"z": {"type": "string"}, "a": {"type": "null"}}})");
  absl::StatusOr<ParsedGenerateRequest> schema = ParseGenerateRequest(r, Model(true));
  ASSERT_TRUE(schema.ok()) << schema.status();
  ASSERT_NE(schema->engine.sampling.json_output, nullptr);
  ASSERT_NE(schema->engine.sampling.json_schema, nullptr);
  EXPECT_EQ(schema->engine.sampling.json_schema->node(0).literals,
            (std::vector<std::string>{"\"z\"", "\"a\""}));
}

TEST_F(GrpcConversionTest, TextPromptIsEncoded) {
  v1::GenerateRequest r;
  r.set_text("hello");
  absl::StatusOr<ParsedGenerateRequest> parsed = ParseGenerateRequest(r, Model(true));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto expected = tokenizer_->Encode("hello", true);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(parsed->engine.prompt, *expected);
  for (int32_t id : parsed->engine.prompt) EXPECT_LT(id, 512);
}

TEST(GrpcDeadlineTest, ConvertsToTheSteadyClock) {
  const auto sys_now = std::chrono::system_clock::now();
  const auto steady_now = std::chrono::steady_clock::now();
  EXPECT_FALSE(ToSteadyDeadline(std::chrono::system_clock::time_point::max(), sys_now, steady_now));
  auto d = ToSteadyDeadline(sys_now + std::chrono::seconds(5), sys_now, steady_now);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d - steady_now, std::chrono::seconds(5));
  auto past = ToSteadyDeadline(sys_now - std::chrono::seconds(1), sys_now, steady_now);
  ASSERT_TRUE(past.has_value());
  EXPECT_LT(*past, steady_now);
}

// Feeds `text`'s tokens one event at a time; returns the messages' text pieces.
struct Streamed {
  std::vector<std::string> pieces;
  v1::GenerateResponse last;
  absl::Status status;
  bool stop_signalled = false;
  int tokens = 0;
};

Streamed StreamText(const Tokenizer& tokenizer, const std::string& text,
                    std::vector<std::string> stop, RequestEvent final_event = {}) {
  Streamed out;
  GrpcResponseBuilder builder(&tokenizer, true, std::move(stop));
  auto ids = tokenizer.Encode(text, false);
  EXPECT_TRUE(ids.ok());
  for (int32_t id : *ids) {
    RequestEvent e;
    e.id = 1;
    e.tokens = {id};
    v1::GenerateResponse r;
    if (builder.AddTokens(e, &r)) {
      EXPECT_FALSE(out.stop_signalled) << "stop signalled twice";
      out.stop_signalled = true;
    }
    out.tokens += r.token_ids_size();
    out.pieces.push_back(r.text());
  }
  final_event.finished = true;
  final_event.usage.prompt_tokens = 4;
  final_event.usage.completion_tokens = static_cast<int64_t>(ids->size());
  out.status = builder.Finish(final_event, &out.last);
  out.pieces.push_back(out.last.text());
  return out;
}

std::string Join(const std::vector<std::string>& pieces) {
  std::string s;
  for (const auto& p : pieces) s += p;
  return s;
}

TEST_F(GrpcConversionTest, StreamedTextIsCompleteAndNeverSplitsACharacter) {
  const std::string text = "Grüße, 世界! naïve café 🙂 done";
  for (const auto& stop : {std::vector<std::string>{}, std::vector<std::string>{"never-there"}}) {
    Streamed s = StreamText(*tokenizer_, text, stop);
    EXPECT_EQ(Join(s.pieces), text);
    for (const auto& p : s.pieces) EXPECT_TRUE(IsValidUtf8(p)) << p;
    EXPECT_FALSE(s.stop_signalled);
    EXPECT_TRUE(s.status.ok());
    EXPECT_EQ(s.last.finish_reason(), v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(s.last.usage().prompt_tokens(), 4);
  }
}

TEST_F(GrpcConversionTest, StopStringTruncatesTextBeforeTheMatch) {
  // "stop" is split over several byte-level tokens; the earliest of two stops wins.
  Streamed s = StreamText(*tokenizer_, "one two, stop here. three", {"three", "stop"});
  EXPECT_TRUE(s.stop_signalled);
  EXPECT_EQ(Join(s.pieces), "one two, ");
  EXPECT_EQ(s.last.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(s.last.finish_message(), "stop");
  EXPECT_TRUE(s.status.ok());

  // The engine reports the cancellation we asked for; the client still sees STOP.
  RequestEvent cancelled;
  cancelled.finish_reason = FinishReason::kCancelled;
  cancelled.status = absl::CancelledError("cancelled");
  Streamed c = StreamText(*tokenizer_, "abc STOP", {"STOP"}, cancelled);
  EXPECT_EQ(Join(c.pieces), "abc ");
  EXPECT_EQ(c.last.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_TRUE(c.status.ok());
}

TEST_F(GrpcConversionTest, FinishReasonsAndStatuses) {
  struct Case {
    FinishReason reason;
    absl::Status status;
    v1::FinishReason expected;
    absl::StatusCode rpc;
  };
  const std::vector<Case> cases = {
      {FinishReason::kLength, absl::OkStatus(), v1::FINISH_REASON_LENGTH, absl::StatusCode::kOk},
      {FinishReason::kEos, absl::OkStatus(), v1::FINISH_REASON_EOS, absl::StatusCode::kOk},
      {FinishReason::kStop, absl::OkStatus(), v1::FINISH_REASON_STOP, absl::StatusCode::kOk},
      {FinishReason::kCancelled, absl::CancelledError("shutting down"), v1::FINISH_REASON_CANCELLED,
       absl::StatusCode::kOk},
      {FinishReason::kCancelled, absl::DeadlineExceededError("deadline"),
       v1::FINISH_REASON_CANCELLED, absl::StatusCode::kDeadlineExceeded},
      {FinishReason::kError, absl::InternalError("boom"), v1::FINISH_REASON_ERROR,
       absl::StatusCode::kInternal},
  };
  for (const Case& c : cases) {
    GrpcResponseBuilder builder(nullptr, true, {});
    RequestEvent e;
    e.tokens = {3, 4};
    e.finished = true;
    e.finish_reason = c.reason;
    e.status = c.status;
    e.usage.prompt_tokens = 3;
    e.usage.completion_tokens = 2;
    e.usage.decode_solver.Add(SolveResult{10, 0.01f, true});
    e.usage.decode_solver.Add(SolveResult{6, 0.001f, false});
    e.usage.queue_seconds = 0.25;
    e.usage.time_to_first_token_seconds = 0.5;
    v1::GenerateResponse r;
    EXPECT_FALSE(builder.AddTokens(e, &r));
    absl::Status status = builder.Finish(e, &r);
    EXPECT_EQ(status.code(), c.rpc) << FinishReasonName(c.reason);
    EXPECT_EQ(r.finish_reason(), c.expected);
    EXPECT_EQ(r.finish_message(), std::string(c.status.message()));
    EXPECT_EQ(r.token_ids_size(), 2);
    EXPECT_TRUE(r.text().empty());  // no tokenizer
    EXPECT_EQ(r.usage().completion_tokens(), 2);
    EXPECT_EQ(r.usage().decode().solves(), 2);
    EXPECT_EQ(r.usage().decode().total_iterations(), 16);
    EXPECT_DOUBLE_EQ(r.usage().decode().mean_iterations(), 8.0);
    EXPECT_EQ(r.usage().decode().max_iterations(), 10);
    EXPECT_DOUBLE_EQ(r.usage().decode().capped_fraction(), 0.5);
    EXPECT_DOUBLE_EQ(r.usage().queue_time_seconds(), 0.25);
    EXPECT_DOUBLE_EQ(r.usage().time_to_first_token_seconds(), 0.5);
  }
}

TEST_F(GrpcConversionTest, LogprobsAreParallelToTokens) {
  GrpcResponseBuilder builder(tokenizer_, true, {});
  RequestEvent e;
  e.tokens = {70, 71};
  e.logprobs = {LogprobEntry{70, -0.5f, {{70, -0.5f}, {80, -1.5f}}}, LogprobEntry{71, -0.25f, {}}};
  v1::GenerateResponse r;
  builder.AddTokens(e, &r);
  ASSERT_EQ(r.logprobs_size(), 2);
  EXPECT_EQ(r.logprobs(0).token_id(), 70);
  EXPECT_FLOAT_EQ(r.logprobs(0).logprob(), -0.5f);
  ASSERT_EQ(r.logprobs(0).top_size(), 2);
  EXPECT_EQ(r.logprobs(0).top(1).token_id(), 80);
  EXPECT_EQ(r.logprobs(1).top_size(), 0);
  EXPECT_EQ(r.prompt_logprobs_size(), 0);
}

TEST_F(GrpcConversionTest, PromptLogprobsComeWithTheFirstMessage) {
  v1::GenerateRequest request = IdsRequest({1, 2, 3});
  request.set_prompt_logprobs(1);
  absl::StatusOr<ParsedGenerateRequest> parsed = ParseGenerateRequest(request, Model(false));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->engine.prompt_logprobs, 1);

  GrpcResponseBuilder builder(tokenizer_, true, {});
  RequestEvent e;
  e.tokens = {70};
  e.prompt_logprobs = {LogprobEntry{2, -1.5f, {{9, -0.5f}}, 3}, LogprobEntry{3, -0.25f, {}, 1}};
  v1::GenerateResponse r;
  builder.AddTokens(e, &r);
  ASSERT_EQ(r.prompt_logprobs_size(), 2);
  EXPECT_EQ(r.prompt_logprobs(0).token_id(), 2);
  EXPECT_FLOAT_EQ(r.prompt_logprobs(0).logprob(), -1.5f);
  EXPECT_EQ(r.prompt_logprobs(0).rank(), 3);
  ASSERT_EQ(r.prompt_logprobs(0).top_size(), 1);
  EXPECT_EQ(r.prompt_logprobs(0).top(0).token_id(), 9);
  EXPECT_EQ(r.prompt_logprobs(1).rank(), 1);
  EXPECT_TRUE(HasContent(r));
}

}  // namespace
}  // namespace ridge
