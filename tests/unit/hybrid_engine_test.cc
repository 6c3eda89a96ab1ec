// The serving engine on a hybrid_qwen3 model with a paged KV cache: sequences pushed through a
// pool too small for all of them at once are preempted and recomputed, and still give exactly
// the tokens each gives alone; cancellation and deadlines give their blocks back; a request
// that could never fit the pool is refused at Submit.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>

#include "engine/engine.h"
#include "engine/offline_generation.h"
#include "models/arch/load_model.h"
#include "tests/support/collecting_sink.h"

namespace ridge {
namespace {

using testing::CollectingSink;
using namespace std::chrono_literals;

class CountingObserver final : public EngineObserver {
 public:
  void OnStep(const StepReport& report) override {
    preemptions += report.preemptions;
    max_blocks_used = std::max<int64_t>(max_blocks_used, report.kv_blocks_used);
  }
  void OnRequestFinished(FinishReason, const absl::Status&, const RequestUsage&) override {}
  void OnInterTokenLatency(double) override {}
  void OnRejected(const absl::Status&) override {}
  std::atomic<int64_t> preemptions = 0, max_blocks_used = 0;
};

class HybridEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Blocks of 8 tokens; layers GKA-*-GKA-SWA (window 24).
    auto model =
        LoadModel(std::filesystem::path(RIDGE_TEST_DATA_DIR) / "hybrid_qwen3" / "gka_swa_mix",
                  LoadFormat::kCheckpoint, /*kv_block_size=*/8);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
  }

  std::unique_ptr<Engine> Start(EngineOptions options, EngineObserver* observer = nullptr) {
    auto engine = Engine::Create(model_.get(), options, observer);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return std::move(*engine);
  }

  static EngineRequest Request(int index, int prompt_tokens, int max_tokens) {
    EngineRequest r;
    for (int t = 0; t < prompt_tokens; ++t) r.prompt.push_back((t * 37 + index * 11 + 5) % 256);
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    if (index % 2 == 1) {  // half sample, with penalties that read the whole history
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 1000 + index;
      r.sampling.repetition_penalty = 1.2f;
    } else {
      r.sampling.temperature = 0.0f;
    }
    return r;
  }

  std::unique_ptr<Model> model_;
};

TEST_F(HybridEngineTest, ASmallKvPoolPreemptsAndEveryOutputIsAsAlone) {
  // 14 blocks of 8 = 112 tokens; each request needs 5-9 blocks alone, six of them need 41.
  CountingObserver observer;
  auto engine =
      Start({.max_slots = 6, .cpu_kv_blocks = 14, .max_waiting = 16, .prefill_token_budget = 24},
            &observer);
  std::vector<EngineRequest> requests;
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (int i = 0; i < 6; ++i) {
    requests.push_back(Request(i, 20 + 7 * i, 18 + 2 * i));
    sinks.push_back(std::make_shared<CollectingSink>());
    ASSERT_TRUE(engine->Submit(requests.back(), sinks.back()).ok());
  }
  for (int i = 0; i < 6; ++i) {
    const RequestEvent last = sinks[i]->Wait();
    ASSERT_TRUE(last.status.ok()) << last.status;
    const GenerationRequest alone{requests[i].prompt, requests[i].sampling,
                                  SolverOptions{0.0f, 30}};
    auto expected = GenerateOffline(*model_, {&alone, 1}, nullptr);
    ASSERT_TRUE(expected.ok()) << expected.status();
    EXPECT_EQ(sinks[i]->tokens(), (*expected)[0].tokens) << "request " << i;
    EXPECT_EQ(last.usage.completion_tokens, 18 + 2 * i);
    EXPECT_EQ(last.usage.prompt_tokens, 20 + 7 * i);
  }
  EXPECT_TRUE(engine->WaitIdle(std::chrono::steady_clock::now() + 10s));
  EXPECT_GT(observer.preemptions, 0) << "the pool was meant to be too small for all at once";
  EXPECT_LE(observer.max_blocks_used, 14);
  EXPECT_EQ(engine->Snapshot().kv_blocks_used, 0);
  EXPECT_EQ(engine->Snapshot().kv_blocks_total, 14);
}

TEST_F(HybridEngineTest, ARequestThatCouldNeverFitIsRefused) {
  auto engine = Start({.max_slots = 2, .cpu_kv_blocks = 4});
  auto sink = std::make_shared<CollectingSink>();
  const auto refused = engine->Submit(Request(0, 20, 20), sink);  // 40 tokens: 5 blocks
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(refused.status().message().find("max_tokens: "), std::string::npos);
  EXPECT_NE(refused.status().message().find("the KV cache holds 4 blocks (32 tokens)"),
            std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(engine->Submit(Request(0, 20, 12), sink).ok());  // 32 tokens fit
  EXPECT_TRUE(sink->Wait().status.ok());
  // Nor one past the model's positions (max_position_embeddings 4096), however large the cache.
  auto big = Start({.max_slots = 1, .cpu_kv_blocks = 1024});
  const auto too_long = big->Submit(Request(0, 20, 4077), std::make_shared<CollectingSink>());
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("the model's context of 4096 tokens"),
            std::string::npos)
      << too_long.status().message();
  EXPECT_TRUE(big->Submit(Request(0, 20, 4076), std::make_shared<CollectingSink>()).ok());
  // A max_tokens the client did not name is lowered to what fits instead (as vLLM does): to
  // the cache's 32 tokens here, less the prompt.
  EngineRequest defaulted = Request(0, 20, 4096);
  defaulted.max_tokens_defaulted = true;
  auto fits = std::make_shared<CollectingSink>();
  ASSERT_TRUE(engine->Submit(defaulted, fits).ok());
  EXPECT_EQ(fits->Wait().usage.completion_tokens, 12);
}

TEST_F(HybridEngineTest, CancellationAndDeadlinesGiveBlocksBack) {
  // Long enough (4,000 tokens each) that the deadline and the cancellation come first.
  auto engine = Start({.max_slots = 2, .cpu_kv_blocks = 1100});
  auto cancelled = std::make_shared<CollectingSink>();
  auto expired = std::make_shared<CollectingSink>();
  auto id = engine->Submit(Request(0, 40, 4000), cancelled);
  ASSERT_TRUE(id.ok()) << id.status();
  EngineRequest late = Request(1, 30, 4000);
  late.deadline = std::chrono::steady_clock::now() + 300ms;
  ASSERT_TRUE(engine->Submit(late, expired).ok());
  cancelled->WaitForTokens(3);
  EXPECT_GT(engine->Snapshot().kv_blocks_used, 0);
  engine->Cancel(*id);
  EXPECT_EQ(cancelled->Wait().finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(expired->Wait().status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(engine->WaitIdle(std::chrono::steady_clock::now() + 10s));
  EXPECT_EQ(engine->Snapshot().kv_blocks_used, 0);
  EXPECT_EQ(engine->Snapshot().slots_used, 0);
}

}  // namespace
}  // namespace ridge
