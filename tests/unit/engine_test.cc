#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/offline_generation.h"
#include "models/cpu_backend.h"
#include "tests/support/collecting_sink.h"
#include "tests/unit/test_checkpoint_writer.h"

namespace ridge {
namespace {

using testing::CollectingSink;

using namespace std::chrono_literals;

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto config = testing::SmallMesaConfig();
    const auto dir =
        testing::WriteMesaCheckpoint("engine_test", config, testing::RandomMesaTensors(config, 5));
    auto model = MesaNetModel::Load(dir);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
  }

  std::unique_ptr<Engine> Start(EngineOptions options) {
    auto engine = Engine::Create(model_.get(), options, nullptr);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return std::move(*engine);
  }

  static EngineRequest Request(std::vector<int32_t> prompt, int max_tokens) {
    EngineRequest r;
    r.prompt = std::move(prompt);
    r.sampling.max_tokens = max_tokens;
    r.sampling.temperature = 0.0f;
    r.sampling.ignore_eos = true;
    return r;
  }

  std::unique_ptr<MesaNetModel> model_;
};

// WaitIdle returns only once the finished request's last event has reached its sink, even when
// the sink is slow to take it.
class SlowFinalSink final : public RequestSink {
 public:
  void OnEvent(RequestEvent event) override {
    if (!event.finished) return;
    std::this_thread::sleep_for(100ms);
    got_final = true;
  }
  std::atomic<bool> got_final = false;
};

TEST_F(EngineTest, WaitIdleWaitsForTheLastEvents) {
  auto engine = Start({.max_slots = 2});
  auto sink = std::make_shared<SlowFinalSink>();
  ASSERT_TRUE(engine->Submit(Request({1, 2, 3}, 2), sink).ok());
  EXPECT_TRUE(engine->WaitIdle(std::chrono::steady_clock::now() + 10s));
  EXPECT_TRUE(sink->got_final);
}

TEST_F(EngineTest, ConcurrentRequestsMatchOfflineGeneration) {
  // A small prefill budget splits the longer prompts over several steps while others decode.
  auto engine = Start({.max_slots = 4, .max_waiting = 16, .prefill_token_budget = 7});
  std::vector<GenerationRequest> offline;
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt;
    for (int t = 0; t < 3 + 5 * i; ++t) prompt.push_back((t * 11 + i * 3) % 50);
    EngineRequest r = Request(prompt, 6 + i);
    if (i % 2 == 1) {
      r.sampling.temperature = 0.9f;
      r.sampling.seed = 100 + i;
    }
    offline.push_back({r.prompt, r.sampling, SolverOptions{}});
    sinks.push_back(std::make_shared<CollectingSink>());
    ASSERT_TRUE(engine->Submit(r, sinks.back()).ok());
  }
  auto expected = GenerateOffline(*model_, offline, nullptr);
  ASSERT_TRUE(expected.ok());
  for (int i = 0; i < 6; ++i) {
    const RequestEvent last = sinks[i]->Wait();
    EXPECT_TRUE(last.status.ok()) << last.status;
    EXPECT_EQ(last.finish_reason, FinishReason::kLength);
    EXPECT_EQ(sinks[i]->tokens(), (*expected)[i].tokens) << "request " << i;
    EXPECT_EQ(last.usage.completion_tokens, 6 + i);
    EXPECT_EQ(last.usage.prompt_tokens, 3 + 5 * i);
    EXPECT_GT(last.usage.prefill_solver.solves, 0);
    EXPECT_GT(last.usage.decode_solver.solves, 0);
  }
  EXPECT_TRUE(engine->WaitIdle(std::chrono::steady_clock::now() + 10s));
  EXPECT_EQ(engine->Snapshot().slots_used, 0);
}

// A backend whose first state reset fails (as a GPU's would after a device error).
class FailingResetBackend : public CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  absl::Status ResetSlot(int64_t slot) override {
    if (fail_next_.exchange(false)) return absl::InternalError("injected reset failure");
    return CpuBackend::ResetSlot(slot);
  }

 private:
  std::atomic<bool> fail_next_{true};
};

// The admitted request whose slot could not be reset ends with an error (it used to abort the
// process when the same step planned its prefill); the engine goes on serving.
TEST_F(EngineTest, FailedStateResetEndsOnlyThatRequest) {
  FailingResetBackend backend(model_.get(), 2);
  auto engine = Engine::Create(&backend, {.max_slots = 2}, nullptr);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto bad = std::make_shared<CollectingSink>();
  ASSERT_TRUE((*engine)->Submit(Request({1, 2, 3}, 4), bad).ok());
  const RequestEvent failed = bad->Wait();
  EXPECT_EQ(failed.finish_reason, FinishReason::kError);
  EXPECT_FALSE(failed.status.ok());
  auto good = std::make_shared<CollectingSink>();
  ASSERT_TRUE((*engine)->Submit(Request({4, 5}, 4), good).ok());
  const RequestEvent done = good->Wait();
  EXPECT_TRUE(done.status.ok()) << done.status;
  EXPECT_EQ(done.finish_reason, FinishReason::kLength);
  EXPECT_EQ(good->tokens().size(), 4u);
  EXPECT_TRUE((*engine)->WaitIdle(std::chrono::steady_clock::now() + 10s));
  EXPECT_EQ((*engine)->Snapshot().slots_used, 0);
}

// A backend that breaks for good on demand (as a tensor-parallel group whose NCCL communicators
// were aborted): every step fails and Health says why.
class BreakingBackend : public CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  void Break() { broken_ = true; }
  absl::Status Health() const override {
    return broken_ ? absl::UnavailableError("rank 1: communicator aborted") : absl::OkStatus();
  }
  absl::Status Forward(std::span<const SlotChunk> chunks, LogitsFor which,
                       std::vector<float>* logits) override {
    if (broken_) return absl::InternalError("injected step failure");
    return CpuBackend::Forward(chunks, which, logits);
  }
  absl::Status ForwardGreedy(std::span<const SlotChunk> chunks,
                             std::vector<int32_t>* next) override {
    if (broken_) return absl::InternalError("injected step failure");
    return CpuBackend::ForwardGreedy(chunks, next);
  }
  absl::Status ForwardSample(std::span<const SlotChunk> chunks, std::span<const TokenPick> picks,
                             std::vector<PickedToken>* picked) override {
    if (broken_) return absl::InternalError("injected step failure");
    return CpuBackend::ForwardSample(chunks, picks, picked);
  }

 private:
  std::atomic<bool> broken_{false};
};

// A step that fails on a backend that can never step again fails every request (running and
// waiting), refuses new ones naming the reason, shows in the snapshot and calls
// on_backend_failure once; a step that fails on a healthy backend only fails its requests.
TEST_F(EngineTest, ABrokenBackendFailsEverythingAndIsReported) {
  BreakingBackend backend(model_.get(), 1);
  std::atomic<int> reported{0};
  std::mutex mutex;
  absl::Status reported_status;
  EngineOptions options{.max_slots = 1, .max_waiting = 8};
  options.on_backend_failure = [&](const absl::Status& why) {
    std::lock_guard<std::mutex> lock(mutex);
    reported_status = why;
    ++reported;
  };
  auto engine = Engine::Create(&backend, options, nullptr);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto first = std::make_shared<CollectingSink>();
  ASSERT_TRUE((*engine)->Submit(Request({1, 2, 3}, 4), first).ok());
  EXPECT_TRUE(first->Wait().status.ok());

  auto running = std::make_shared<CollectingSink>();
  auto waiting = std::make_shared<CollectingSink>();
  ASSERT_TRUE((*engine)->Submit(Request({1, 2, 3}, 60000), running).ok());
  running->WaitForTokens(2);
  ASSERT_TRUE((*engine)->Submit(Request({4, 5}, 4), waiting).ok());  // no slot: it waits
  backend.Break();
  const RequestEvent failed = running->Wait();
  EXPECT_EQ(failed.finish_reason, FinishReason::kError);
  EXPECT_NE(failed.status.message().find("injected step failure"), std::string::npos)
      << failed.status;
  const RequestEvent refused_waiting = waiting->Wait();
  EXPECT_EQ(refused_waiting.finish_reason, FinishReason::kError);
  EXPECT_EQ(refused_waiting.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused_waiting.status.message().find("rank 1: communicator aborted"),
            std::string::npos)
      << refused_waiting.status;

  const auto late = (*engine)->Submit(Request({6}, 4), std::make_shared<CollectingSink>());
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(late.status().message().find("can no longer run (rank 1: communicator aborted)"),
            std::string::npos)
      << late.status();
  EXPECT_TRUE((*engine)->WaitIdle(std::chrono::steady_clock::now() + 10s));
  const EngineSnapshot snap = (*engine)->Snapshot();
  EXPECT_NE(snap.backend_failure.find("communicator aborted"), std::string::npos);
  EXPECT_TRUE(snap.draining);
  EXPECT_EQ(snap.waiting, 0);
  EXPECT_EQ(snap.running, 0);
  EXPECT_EQ(snap.slots_used, 0);
  EXPECT_EQ(reported.load(), 1);
  std::lock_guard<std::mutex> lock(mutex);
  EXPECT_EQ(reported_status.code(), absl::StatusCode::kUnavailable);
}

// Token picks are checked before any work, on the CPU backend as on the GPU one: a history
// token outside the vocabulary (which the host sampler would abort on), too many logprobs, a
// uniform outside [0, 1) or a pick count that does not match the chunks is an error.
TEST_F(EngineTest, BackendRefusesBadTokenPicks) {
  CpuBackend backend(model_.get(), 1);
  SamplingParams params;
  auto sampler = Sampler::Create(params, static_cast<int32_t>(model_->config().vocab_size));
  ASSERT_TRUE(sampler.ok());
  const int32_t token = 1;
  const std::vector<int32_t> prompt = {1, 2};
  const std::vector<int32_t> bad_history = {static_cast<int32_t>(model_->config().vocab_size)};
  const SlotChunk chunk{0, {&token, 1}, {}, nullptr, SolvePhase::kDecode};
  std::vector<PickedToken> picked;
  const TokenPick good{&*sampler, 0.5, prompt, {}, true, 3};
  EXPECT_TRUE(backend.ForwardSample({&chunk, 1}, {&good, 1}, &picked).ok());
  ASSERT_EQ(picked.size(), 1u);
  EXPECT_EQ(picked[0].top.size(), 3u);
  const TokenPick bad_picks[] = {{&*sampler, 0.5, prompt, bad_history, false, 0},
                                 {&*sampler, 0.5, prompt, {}, true, kMaxTopLogprobs + 1},
                                 {&*sampler, 1.0, prompt, {}, false, 0}};
  for (const TokenPick& bad : bad_picks) {
    EXPECT_EQ(backend.ForwardSample({&chunk, 1}, {&bad, 1}, &picked).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(backend.ForwardSample({&chunk, 1}, {}, &picked).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(EngineTest, StopStringCancelFinishesAsStop) {
  auto engine = Start({.max_slots = 2});
  auto sink = std::make_shared<CollectingSink>();
  auto id = engine->Submit(Request({1, 2, 3}, 60000), sink);
  ASSERT_TRUE(id.ok());
  sink->WaitForTokens(2);
  engine->Cancel(*id, CancelReason::kStopString);
  const RequestEvent last = sink->Wait();
  EXPECT_EQ(last.finish_reason, FinishReason::kStop);
  EXPECT_TRUE(last.status.ok()) << last.status;
  EXPECT_TRUE(engine->WaitIdle(std::chrono::steady_clock::now() + 10s));
  EXPECT_EQ(engine->Snapshot().slots_used, 0);
}

TEST_F(EngineTest, ShutdownCancelSaysTheServerIsShuttingDown) {
  auto engine = Start({.max_slots = 2});
  auto sink = std::make_shared<CollectingSink>();
  auto id = engine->Submit(Request({1, 2, 3}, 60000), sink);
  ASSERT_TRUE(id.ok());
  sink->WaitForTokens(2);
  engine->Cancel(*id, CancelReason::kShutdown);
  const RequestEvent last = sink->Wait();
  EXPECT_EQ(last.finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(last.status.code(), absl::StatusCode::kUnavailable) << last.status;
  EXPECT_NE(last.status.message().find("shutting down"), std::string::npos) << last.status;
  EXPECT_TRUE(engine->WaitIdle(std::chrono::steady_clock::now() + 10s));
}

TEST_F(EngineTest, CancellationFreesTheSlot) {
  auto engine = Start({.max_slots = 2});
  auto sink = std::make_shared<CollectingSink>();
  auto id = engine->Submit(Request({1, 2, 3}, 60000), sink);
  ASSERT_TRUE(id.ok());
  sink->WaitForTokens(3);
  EXPECT_EQ(engine->Snapshot().slots_used, 1);
  engine->Cancel(*id);
  const RequestEvent last = sink->Wait();
  EXPECT_EQ(last.finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(last.status.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(engine->WaitIdle(std::chrono::steady_clock::now() + 10s));
  EXPECT_EQ(engine->Snapshot().slots_used, 0);
  engine->Cancel(*id);  // unknown now: ignored
}

TEST_F(EngineTest, DeadlineExpires) {
  auto engine = Start({.max_slots = 2});
  auto sink = std::make_shared<CollectingSink>();
  EngineRequest r = Request({1, 2}, 60000);
  r.deadline = std::chrono::steady_clock::now() + 100ms;
  ASSERT_TRUE(engine->Submit(r, sink).ok());
  const RequestEvent last = sink->Wait();
  EXPECT_EQ(last.finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(last.status.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(EngineTest, FullQueueIsRejectedAtOnce) {
  auto engine = Start({.max_slots = 1, .max_waiting = 1});
  auto running = std::make_shared<CollectingSink>();
  auto first = engine->Submit(Request({1}, 60000), running);
  ASSERT_TRUE(first.ok());
  running->WaitForTokens(1);  // admitted: holds the only slot
  auto queued = std::make_shared<CollectingSink>();
  auto second = engine->Submit(Request({2}, 2), queued);
  ASSERT_TRUE(second.ok());
  auto third = engine->Submit(Request({3}, 2), std::make_shared<CollectingSink>());
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("queue is full"), std::string::npos);
  engine->Cancel(*first);
  EXPECT_EQ(queued->Wait().finish_reason, FinishReason::kLength);  // ran once the slot freed
}

TEST_F(EngineTest, DrainRefusesNewWorkAndFinishesRunning) {
  auto engine = Start({.max_slots = 2});
  auto sink = std::make_shared<CollectingSink>();
  ASSERT_TRUE(engine->Submit(Request({1, 2}, 20), sink).ok());
  engine->StartDrain();
  EXPECT_TRUE(engine->Snapshot().draining);
  auto refused = engine->Submit(Request({1}, 2), std::make_shared<CollectingSink>());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(engine->WaitIdle(std::chrono::steady_clock::now() + 30s));
  EXPECT_EQ(sink->Wait().usage.completion_tokens, 20);
}

TEST_F(EngineTest, InvalidRequestsAreRejectedWithTheField) {
  auto engine = Start({.max_slots = 1, .max_prompt_tokens = 8, .max_solver_iterations = 50});
  struct Case {
    EngineRequest request;
    absl::StatusCode code;
    std::string text;
  };
  std::vector<Case> cases;
  cases.push_back({Request({}, 1), absl::StatusCode::kInvalidArgument, "prompt"});
  cases.push_back({Request({1, 50}, 1), absl::StatusCode::kInvalidArgument, "token id 50"});
  cases.push_back({Request(std::vector<int32_t>(9, 1), 1), absl::StatusCode::kOutOfRange, "limit"});
  EngineRequest bad_sampling = Request({1}, 1);
  bad_sampling.sampling.top_p = 0.0f;
  cases.push_back({bad_sampling, absl::StatusCode::kInvalidArgument, "top_p"});
  EngineRequest bad_logprobs = Request({1}, 1);
  bad_logprobs.top_logprobs = 21;
  cases.push_back({bad_logprobs, absl::StatusCode::kInvalidArgument, "top_logprobs"});
  EngineRequest bad_solver = Request({1}, 1);
  bad_solver.solver = SolverOptions{0.0f, 51};
  cases.push_back({bad_solver, absl::StatusCode::kInvalidArgument, "max_iterations"});
  for (const Case& c : cases) {
    auto result = engine->Submit(c.request, std::make_shared<CollectingSink>());
    EXPECT_EQ(result.status().code(), c.code) << c.text;
    EXPECT_NE(result.status().message().find(c.text), std::string::npos) << result.status();
  }
  EXPECT_FALSE(Engine::Create(model_.get(), {.max_slots = 0}, nullptr).ok());
}

TEST_F(EngineTest, LogprobsAndStopTokens) {
  auto engine = Start({.max_slots = 2});
  EngineRequest r = Request({4, 5, 6}, 8);
  r.top_logprobs = 3;
  auto sink = std::make_shared<CollectingSink>();
  ASSERT_TRUE(engine->Submit(r, sink).ok());
  sink->Wait();
  const auto tokens = sink->tokens();
  const auto logprobs = sink->logprobs();
  ASSERT_EQ(logprobs.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    ASSERT_EQ(logprobs[i].top.size(), 3u);
    EXPECT_EQ(logprobs[i].top[0].first, tokens[i]);  // greedy: the sampled token is the top one
    EXPECT_GE(logprobs[i].top[0].second, logprobs[i].top[1].second);
    EXPECT_LE(logprobs[i].logprob, 0.0f);
  }
  // Stopping on the third greedy token: only two tokens come back.
  EngineRequest stop = Request({4, 5, 6}, 8);
  stop.sampling.stop_token_ids = {tokens[2]};
  auto stopped = std::make_shared<CollectingSink>();
  ASSERT_TRUE(engine->Submit(stop, stopped).ok());
  EXPECT_EQ(stopped->Wait().finish_reason, FinishReason::kStop);
  const auto got = stopped->tokens();
  if (tokens[0] != tokens[2] && tokens[1] != tokens[2]) {
    EXPECT_EQ(got, (std::vector<int32_t>{tokens[0], tokens[1]}));
  }
}

// min_tokens (vLLM's): the stop tokens are not sampled before that many tokens, after which they
// end the request again; the model's end-of-sequence tokens are held off the same way.
TEST_F(EngineTest, MinTokensHoldsOffTheEndTokens) {
  auto engine = Start({.max_slots = 2});
  auto run = [&](EngineRequest r) {
    auto sink = std::make_shared<CollectingSink>();
    EXPECT_TRUE(engine->Submit(r, sink).ok());
    const FinishReason reason = sink->Wait().finish_reason;
    return std::make_pair(reason, sink->tokens());
  };
  const auto [_, free_run] = run(Request({4, 5, 6}, 12));
  ASSERT_EQ(free_run.size(), 12u);
  // Every token the free greedy run gives in its first 6 is a stop token: without min_tokens
  // the request stops at once, with min_tokens 6 it goes 6 tokens, none of them a stop token,
  // then stops at the first one (or runs to max_tokens).
  EngineRequest held = Request({4, 5, 6}, 12);
  held.sampling.stop_token_ids.assign(free_run.begin(), free_run.begin() + 6);
  EXPECT_EQ(run(held).first, FinishReason::kStop);
  EXPECT_TRUE(run(held).second.empty());
  held.sampling.min_tokens = 6;
  const auto [reason, tokens] = run(held);
  ASSERT_GE(tokens.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(std::count(held.sampling.stop_token_ids.begin(), held.sampling.stop_token_ids.end(),
                         tokens[i]),
              0)
        << "a stop token sampled at " << i;
  }
  EXPECT_TRUE(reason == FinishReason::kStop || tokens.size() == 12u);
  // More than max_tokens: refused, naming the field.
  EngineRequest eos = Request({4, 5, 6}, 4);
  eos.sampling.min_tokens = 5;  // more than max_tokens
  auto sink = std::make_shared<CollectingSink>();
  const auto refused = engine->Submit(eos, sink);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("min_tokens"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace ridge

namespace ridge {
namespace {

// A step's scored prompt rows hold at most 1 GiB of logits, and never more than 2048 rows.
TEST(MaxScoredRowsPerStepTest, AGibibyteOfLogits) {
  EXPECT_EQ(MaxScoredRowsPerStep(4096), 2048);
  EXPECT_EQ(MaxScoredRowsPerStep(151936), 1766);
  EXPECT_EQ(MaxScoredRowsPerStep(int64_t{1} << 30), 1);
}

}  // namespace
}  // namespace ridge
