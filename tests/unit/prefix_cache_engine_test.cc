// The engine with its prefix cache on the CPU: a request whose prompt begins with a cached state
// computes only the rest, and its tokens and log-probabilities are bit-identical to recomputing
// the whole prompt (inside a KV block, at a block boundary, at a prefill-chunk boundary; MesaNet
// and a GKA/attention/sliding-window hybrid); the next turn of a conversation reuses the state a
// finished request left; salts and solver budgets keep their prefixes apart; many clients
// sharing and diverging prefixes while snapshots are evicted all get what they get alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "engine/engine.h"
#include "models/arch/load_model.h"
#include "tests/support/collecting_sink.h"
#include "tests/support/request_outcome.h"
#include "tests/unit/test_checkpoint_writer.h"

namespace ridge {
namespace {

using testing::CollectingSink;

using Outcome = testing::RequestOutcome;
using testing::RunToEnd;

std::vector<int32_t> Tokens(int count, int seed, int vocab) {
  return testing::PatternTokens(count, seed, vocab);
}

EngineRequest Greedy(std::vector<int32_t> prompt, int max_tokens) {
  return testing::GreedyRequest(std::move(prompt), max_tokens);
}

void ExpectSame(const Outcome& got, const Outcome& want, float tolerance, const std::string& what) {
  testing::ExpectSameOutcome(got, want, tolerance, what);
}

class PrefixCacheEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "mesanet") {
      const auto config = testing::SmallMesaConfig();
      const auto dir = testing::WriteMesaCheckpoint("prefix_cache_engine_test", config,
                                                    testing::RandomMesaTensors(config, 7));
      auto model = LoadModel(dir, LoadFormat::kCheckpoint);
      ASSERT_TRUE(model.ok()) << model.status();
      model_ = std::move(*model);
    } else {
      // Blocks of 8 tokens; layers GKA-*-GKA-SWA (window 24).
      auto model =
          LoadModel(std::filesystem::path(RIDGE_TEST_DATA_DIR) / "hybrid_qwen3" / GetParam(),
                    LoadFormat::kCheckpoint, /*kv_block_size=*/8);
      ASSERT_TRUE(model.ok()) << model.status();
      model_ = std::move(*model);
    }
    vocab_ = static_cast<int>(model_->spec().vocab_size);
    // Hits are compared with recomputes to the bit. CTest runs this binary with OpenBLAS's
    // Sandybridge kernels (tests/CMakeLists.txt, BLAS_CORE): its FMA kernels (Haswell,
    // SkylakeX, and Prescott, which it falls back to on CPUs it does not know) round a
    // product's rows differently with the number of rows around them, ~1e-6 with or without
    // the cache, for this MesaNet's shapes and on some CPUs for the hybrids' too.
    tolerance_ = 0.0f;
  }

  std::unique_ptr<Engine> Start(int64_t cache_slots, int64_t kv_blocks = 0,
                                int64_t prefill_budget = 10) {
    auto engine = Engine::Create(model_.get(),
                                 {.max_slots = 4,
                                  .cpu_kv_blocks = kv_blocks,
                                  .prefix_cache_slots = cache_slots,
                                  .prefill_token_budget = prefill_budget},
                                 nullptr);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return std::move(*engine);
  }

  std::unique_ptr<Model> model_;
  int vocab_ = 0;
  float tolerance_ = 0.0f;
};

TEST_P(PrefixCacheEngineTest, AHitIsBitIdenticalToRecomputingThePrompt) {
  auto cached = Start(/*cache_slots=*/4);
  auto plain = Start(/*cache_slots=*/0);
  const std::vector<int32_t> prompt = Tokens(70, 1, vocab_);
  // Cached lengths inside a block of 8 (13), at a block boundary (16), at a boundary of the
  // 10-token prefill chunks (30), and one long enough that the rest crosses the window.
  for (int cached_length : {5, 13, 16, 30}) {
    SCOPED_TRACE(cached_length);
    const Outcome primed =
        RunToEnd(*cached, Greedy({prompt.begin(), prompt.begin() + cached_length}, 1));
    ASSERT_TRUE(primed.status.ok()) << primed.status;
    const EngineRequest query = Greedy(prompt, 6);
    const Outcome hit = RunToEnd(*cached, query);
    EXPECT_EQ(hit.usage.cached_tokens, cached_length);
    EXPECT_EQ(hit.usage.prompt_tokens, 70);
    const Outcome whole = RunToEnd(*plain, query);
    EXPECT_EQ(whole.usage.cached_tokens, 0);
    ExpectSame(hit, whole, tolerance_, "hit vs whole prompt");
  }
  // The same prompt again hits the deepest state short of its last token: the end of the
  // previous query's answer is no prefix of it, its prompt end (70) is too deep.
  EXPECT_EQ(RunToEnd(*cached, Greedy(prompt, 2)).usage.cached_tokens, 30);
  EXPECT_GE(cached->Snapshot().prefix_snapshots, 1);
}

TEST_P(PrefixCacheEngineTest, TheNextTurnReusesTheFinishedAnswer) {
  auto cached = Start(/*cache_slots=*/4);
  auto plain = Start(/*cache_slots=*/0);
  std::vector<int32_t> conversation = Tokens(20, 2, vocab_);
  for (int turn = 0; turn < 3; ++turn) {
    SCOPED_TRACE(turn);
    const int64_t before = static_cast<int64_t>(conversation.size());
    const Outcome answer = RunToEnd(*cached, Greedy(conversation, 8));
    ASSERT_TRUE(answer.status.ok()) << answer.status;
    ASSERT_EQ(answer.tokens.size(), 8u);
    // Turn 1 computes all; later turns all but the new user tokens and the previous answer's
    // last token (picked, never fed).
    EXPECT_EQ(answer.usage.cached_tokens, turn == 0 ? 0 : before - 12 - 1);
    if (model_->spec().architecture != "mesanet") {
      // GKA solves alike in prefill and decode: the replayed answer is the same state.
      ExpectSame(answer, RunToEnd(*plain, Greedy(conversation, 8)), 0.0f, "turn vs recomputed");
    }
    conversation.insert(conversation.end(), answer.tokens.begin(), answer.tokens.end());
    const std::vector<int32_t> user = Tokens(12, 10 + turn, vocab_);
    conversation.insert(conversation.end(), user.begin(), user.end());
  }
}

TEST_P(PrefixCacheEngineTest, StatesAreKeptAtSnapshotPointsInsideAPrompt) {
  auto cached = Start(/*cache_slots=*/8);  // room for every state below: nothing evicted
  auto plain = Start(/*cache_slots=*/0);
  const std::vector<int32_t> prompt = Tokens(40, 5, vocab_);
  EngineRequest first = Greedy(prompt, 1);
  first.snapshot_points = {12, 27};  // e.g. where chat turns begin
  ASSERT_TRUE(RunToEnd(*cached, first).status.ok());
  // An edited prompt sharing 30 tokens starts from the state at 27, one sharing 15 from 12.
  for (auto [shared, expected] : {std::pair{30, 27}, std::pair{15, 12}}) {
    std::vector<int32_t> edited(prompt.begin(), prompt.begin() + shared);
    const std::vector<int32_t> tail = Tokens(8, 6 + shared, vocab_);
    edited.insert(edited.end(), tail.begin(), tail.end());
    const Outcome hit = RunToEnd(*cached, Greedy(edited, 4));
    EXPECT_EQ(hit.usage.cached_tokens, expected) << shared;
    ExpectSame(hit, RunToEnd(*plain, Greedy(edited, 4)), tolerance_, "edited prompt");
  }
  for (std::vector<int64_t> bad :
       {std::vector<int64_t>{0}, std::vector<int64_t>{40}, std::vector<int64_t>{20, 10}}) {
    EngineRequest refused = Greedy(prompt, 1);
    refused.snapshot_points = bad;
    EXPECT_EQ(cached->Submit(refused, std::make_shared<CollectingSink>()).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST_P(PrefixCacheEngineTest, SaltsAndSolverBudgetsKeepPrefixesApart) {
  auto cached = Start(/*cache_slots=*/4);
  const std::vector<int32_t> prompt = Tokens(40, 3, vocab_);
  EngineRequest prime = Greedy({prompt.begin(), prompt.begin() + 24}, 1);
  prime.cache_salt = "tenant-a";
  ASSERT_TRUE(RunToEnd(*cached, prime).status.ok());
  EngineRequest other = Greedy(prompt, 1);
  other.cache_salt = "tenant-b";
  EXPECT_EQ(RunToEnd(*cached, other).usage.cached_tokens, 0);
  EngineRequest unsalted = Greedy(prompt, 1);
  EXPECT_EQ(RunToEnd(*cached, unsalted).usage.cached_tokens, 0);
  EngineRequest budget = Greedy(prompt, 1);
  budget.cache_salt = "tenant-a";
  budget.solver = SolverOptions{1e-3f, 30};
  EXPECT_EQ(RunToEnd(*cached, budget).usage.cached_tokens, 0);
  EngineRequest same = Greedy(prompt, 1);
  same.cache_salt = "tenant-a";
  EXPECT_EQ(RunToEnd(*cached, same).usage.cached_tokens, 24);
}

TEST_P(PrefixCacheEngineTest, ManyClientsSharingPrefixesUnderEvictionGetWhatTheyGetAlone) {
  // Few snapshots and (for the hybrid) a KV pool that cannot keep them all: evictions run while
  // requests hit, share blocks and diverge.
  // Each client holds a conversation: a system prompt shared by all (a prefix of different
  // lengths), then turns that replay the answers; odd clients use a salt.
  constexpr int kClients = 4, kRequests = 6;
  const std::vector<int32_t> base = Tokens(36, 4, vocab_);
  auto plain = Start(/*cache_slots=*/0);
  std::vector<EngineRequest> requests;
  std::vector<Outcome> alone;
  for (int c = 0; c < kClients; ++c) {
    std::vector<int32_t> conversation(base.begin(), base.begin() + 12 + 6 * c);
    for (int r = 0; r < kRequests; ++r) {
      const std::vector<int32_t> user = Tokens(3 + r, 20 + c * kRequests + r, vocab_);
      conversation.insert(conversation.end(), user.begin(), user.end());
      EngineRequest request = Greedy(conversation, 4 + r % 3);
      request.cache_salt = c % 2 == 0 ? "" : "odd";
      requests.push_back(request);
      alone.push_back(RunToEnd(*plain, request));
      ASSERT_TRUE(alone.back().status.ok()) << alone.back().status;
      conversation.insert(conversation.end(), alone.back().tokens.begin(),
                          alone.back().tokens.end());
    }
  }

  auto cached = Start(/*cache_slots=*/3, /*kv_blocks=*/40);
  std::vector<Outcome> got(requests.size());
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int r = 0; r < kRequests; ++r) {
        got[c * kRequests + r] = RunToEnd(*cached, requests[c * kRequests + r]);
      }
    });
  }
  for (std::thread& t : clients) t.join();
  int64_t hits = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (model_->spec().architecture == "mesanet" && got[i].usage.cached_tokens > 0) {
      // A hit may be a finished request's state (decode solves start from the last solution),
      // so compare the tokens only where that cannot be.
      EXPECT_TRUE(got[i].status.ok()) << got[i].status;
    } else {
      // Requests that share a step may round differently (OpenBLAS's row kernels), so concurrent
      // outputs are compared within 1e-4; the sequential tests above are exact.
      ExpectSame(got[i], alone[i], std::max(tolerance_, 1e-4f), "request " + std::to_string(i));
    }
    hits += got[i].usage.cached_tokens;
  }
  EXPECT_GT(hits, 0);
  const EngineSnapshot idle = cached->Snapshot();
  EXPECT_EQ(idle.slots_used, 0);
  EXPECT_LE(idle.prefix_snapshots, 3);
  // Every block still taken belongs to a snapshot, and evicting them frees the whole pool: a
  // request that needs every block runs.
  const Outcome whole_pool = RunToEnd(*cached, Greedy(Tokens(300, 99, vocab_), 20));
  EXPECT_TRUE(whole_pool.status.ok()) << whole_pool.status;
}

TEST_P(PrefixCacheEngineTest, PreemptedRequestsWithHitsInATinyKvPoolAllFinish) {
  // 10 blocks of 8 for 4 slots: the same four requests alone, then at once, preempting each
  // other while their own earlier states are cached. Waiting requests' hits once stayed locked
  // through the plan, their blocks counted as taken: all could wait on each other for ever.
  auto cached = Start(/*cache_slots=*/4, /*kv_blocks=*/10, /*prefill_budget=*/32);
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 4; ++i) {
    EngineRequest r = Greedy(Tokens(20 + 4 * i, 30 + i, vocab_), 24);
    r.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    requests.push_back(r);
  }
  for (const EngineRequest& r : requests) ASSERT_TRUE(RunToEnd(*cached, r).status.ok());
  for (int round = 0; round < 20; ++round) {
    std::vector<Outcome> together(requests.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < requests.size(); ++i) {
      clients.emplace_back([&, i] { together[i] = RunToEnd(*cached, requests[i]); });
    }
    for (std::thread& t : clients) t.join();
    // Every request finishes (a hang ends at the deadline, with an error). Rows that share a
    // step round differently (OpenBLAS), so the tokens are not compared to the bit here.
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_TRUE(together[i].status.ok()) << "round " << round << ": " << together[i].status;
      EXPECT_EQ(together[i].tokens.size(), 24u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, PrefixCacheEngineTest,
                         ::testing::Values("mesanet", "gka_swa_mix", "all_attn"));

}  // namespace
}  // namespace ridge
