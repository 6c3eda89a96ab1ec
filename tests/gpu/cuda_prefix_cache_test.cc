// The prefix cache on the GPU backends (MesaNet and a GKA/attention/sliding-window hybrid): a
// hit restores the state with a device copy, shares the KV blocks and copies the partly filled
// one, and the tokens and log-probabilities that follow agree with recomputing the whole prompt
// on the same GPU within bf16 rounding (the test prints the largest difference); the next turn
// of a conversation reuses the finished answer's state; a saved session goes to disk and back.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "engine/engine.h"
#include "kernels/device_info.h"
#include "models/cuda/cuda_backend.h"
#include "models/cuda/hybrid_backend.h"
#include "models/mesanet_weights.h"
#include "tests/gpu/small_models.h"
#include "tests/support/request_outcome.h"

namespace ridge {
namespace {


// The log-probability difference allowed between a hit and a recompute: both run bf16 products
// on the same GPU, over differently chunked prompts.
constexpr float kLogprobTolerance = 0.05f;

using Outcome = testing::RequestOutcome;

Outcome RunToEnd(Engine& engine, std::vector<int32_t> prompt, int max_tokens,
                 const std::string& session = "") {
  return testing::RunToEnd(engine,
                           testing::GreedyRequest(std::move(prompt), max_tokens, session));
}

std::string SessionDir() {
  const auto dir = std::filesystem::temp_directory_path() / "ridge_cuda_prefix_cache_test";
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::vector<int32_t> Tokens(int count, int seed, int vocab) {
  return testing::PatternTokens(count, seed, vocab);
}

// Runs the checks on two engines over backends of the same weights: `cached` with a prefix
// cache, `plain` without.
void CheckHitsAgainstRecompute(Engine& cached, Engine& plain, int vocab, const char* what) {
  const std::vector<int32_t> prompt = Tokens(300, 1, vocab);
  float worst = 0.0f;
  // Inside a block of 16 (37), at a block boundary (64), deep (200).
  for (int length : {37, 64, 200}) {
    SCOPED_TRACE(length);
    ASSERT_TRUE(RunToEnd(cached, {prompt.begin(), prompt.begin() + length}, 1).status.ok());
    const Outcome hit = RunToEnd(cached, prompt, 8);
    const Outcome whole = RunToEnd(plain, prompt, 8);
    ASSERT_TRUE(hit.status.ok()) << hit.status;
    ASSERT_TRUE(whole.status.ok()) << whole.status;
    EXPECT_EQ(hit.usage.cached_tokens, length);
    EXPECT_EQ(whole.usage.cached_tokens, 0);
    // The first token's distribution is compared whole; after a pick that differs (two
    // logits within rounding) the paths part, so later ones only while the picks agree.
    for (size_t i = 0; i < hit.logprobs.size(); ++i) {
      const auto& a = hit.logprobs[i].top;
      const auto& b = whole.logprobs[i].top;
      ASSERT_EQ(a.size(), b.size());
      for (size_t j = 0; j < a.size(); ++j) {
        if (a[j].first != b[j].first) continue;  // an alternative swapped with its neighbour
        worst = std::max(worst, std::fabs(a[j].second - b[j].second));
      }
      if (hit.tokens[i] != whole.tokens[i]) break;
    }
  }
  std::printf("%s: largest log-probability difference, hit vs recompute: %.4g\n", what, worst);
  EXPECT_LE(worst, kLogprobTolerance);

  // A conversation: each turn replays the previous answer and adds 20 tokens.
  std::vector<int32_t> conversation = Tokens(120, 2, vocab);
  for (int turn = 0; turn < 3; ++turn) {
    const int64_t before = static_cast<int64_t>(conversation.size());
    const Outcome answer = RunToEnd(cached, conversation, 10);
    ASSERT_TRUE(answer.status.ok()) << answer.status;
    EXPECT_EQ(answer.usage.cached_tokens, turn == 0 ? 0 : before - 20 - 1) << turn;
    conversation.insert(conversation.end(), answer.tokens.begin(), answer.tokens.end());
    const std::vector<int32_t> user = Tokens(20, 10 + turn, vocab);
    conversation.insert(conversation.end(), user.begin(), user.end());
  }
  EXPECT_GE(cached.Snapshot().prefix_snapshots, 1);

  // A session written to disk, forgotten and read back (the device's bytes through the host)
  // continues exactly as it would have: same tokens, same logprobs to the bit.
  ASSERT_TRUE(RunToEnd(cached, Tokens(90, 3, vocab), 6, "s").status.ok());
  const Outcome direct = RunToEnd(cached, Tokens(17, 4, vocab), 6, "s");
  ASSERT_TRUE(direct.status.ok()) << direct.status;
  const absl::StatusOr<SessionInfo> saved = cached.SaveSessionToDisk("s");
  ASSERT_TRUE(saved.ok()) << what << ": " << saved.status();
  const Outcome straight = RunToEnd(cached, Tokens(11, 6, vocab), 6, "s");  // moves it on
  ASSERT_TRUE(straight.status.ok()) << straight.status;
  ASSERT_TRUE(cached.DeleteSession("s").ok());
  auto loaded = cached.LoadSessionFromDisk("s");  // back at the saved point
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->tokens, 90 + 6 + 17 + 6);
  const Outcome after_load = RunToEnd(cached, Tokens(11, 6, vocab), 6, "s");
  ASSERT_TRUE(after_load.status.ok()) << after_load.status;
  EXPECT_EQ(after_load.usage.cached_tokens, 90 + 6 + 17 + 6 - 1);
  EXPECT_EQ(after_load.tokens, straight.tokens);
  ASSERT_EQ(after_load.logprobs.size(), straight.logprobs.size());
  for (size_t i = 0; i < straight.logprobs.size(); ++i) {
    EXPECT_EQ(after_load.logprobs[i].top, straight.logprobs[i].top) << what << " token " << i;
  }
  ASSERT_TRUE(cached.DeleteSession("s").ok());
}

TEST(CudaPrefixCacheTest, HybridHitsAgreeWithRecomputing) {
  if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here";
  auto model = testing::SmallHybridModel({"GKA-*-GKA-SWA", 64, 4, 2, /*window=*/48});
  ASSERT_TRUE(model.ok()) << model.status();
  for (KvCacheDtype dtype : {KvCacheDtype::kBf16, KvCacheDtype::kFp8E4m3}) {
    const bool fp8 = dtype == KvCacheDtype::kFp8E4m3;
    auto with_cache =
        CudaHybridBackend::Create((*model)->spec(), *(*model)->hybrid_weights(),
                                  {.num_slots = 8, .num_kv_blocks = 256, .kv_cache_dtype = dtype});
    auto without =
        CudaHybridBackend::Create((*model)->spec(), *(*model)->hybrid_weights(),
                                  {.num_slots = 4, .num_kv_blocks = 256, .kv_cache_dtype = dtype});
    ASSERT_TRUE(with_cache.ok()) << with_cache.status();
    ASSERT_TRUE(without.ok()) << without.status();
    auto cached = Engine::Create(with_cache->get(),
                                 {.max_slots = 4,
                                  .prefix_cache_slots = 4,
                                  .prefill_token_budget = 2048,
                                  .session_dir = SessionDir()},
                                 nullptr);
    auto plain =
        Engine::Create(without->get(), {.max_slots = 4, .prefill_token_budget = 2048}, nullptr);
    ASSERT_TRUE(cached.ok() && plain.ok());
    CheckHitsAgainstRecompute(**cached, **plain, 384, fp8 ? "hybrid, fp8 KV" : "hybrid, bf16 KV");
  }
}

TEST(CudaPrefixCacheTest, MesaNetHitsAgreeWithRecomputing) {
  if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here";
  const MesaNetConfig config = testing::SmallMesaNetConfig();
  const MesaNetWeights weights = RandomMesaNetWeights(config, 11);
  auto with_cache = CudaBackend::Create(config, weights, {.num_slots = 8});
  auto without = CudaBackend::Create(config, weights, {.num_slots = 4});
  ASSERT_TRUE(with_cache.ok()) << with_cache.status();
  ASSERT_TRUE(without.ok()) << without.status();
  auto cached = Engine::Create(with_cache->get(),
                               {.max_slots = 4,
                                .prefix_cache_slots = 4,
                                .prefill_token_budget = 512,
                                .session_dir = SessionDir()},
                               nullptr);
  auto plain =
      Engine::Create(without->get(), {.max_slots = 4, .prefill_token_budget = 512}, nullptr);
  ASSERT_TRUE(cached.ok() && plain.ok());
  CheckHitsAgainstRecompute(**cached, **plain, 300, "MesaNet");
}

}  // namespace
}  // namespace ridge
