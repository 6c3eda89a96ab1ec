// Prompt scoring on the CUDA backends (TokenPick::score_next): the rows a step scores come back
// from the device sampler with the token forced, and must equal the log-softmax, the most likely
// tokens and the rank that the host computes from the same step's logits of every row (a twin
// backend given the same chunks); several chunks in one step, scored rows beside picked ones,
// for MesaNet (CudaBackend) and a hybrid with attention (CudaHybridBackend). Then the engine on
// the GPU against the CPU engine.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "kernels/device_info.h"
#include "models/cuda/cuda_backend.h"
#include "models/cuda/hybrid_backend.h"
#include "models/mesanet_weights.h"
#include "sampling/sampler.h"
#include "tests/gpu/small_mesa_models.h"
#include "tests/gpu/small_models.h"
#include "tests/support/collecting_sink.h"

namespace ridge {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here"

// A step of `chunks` whose first chunk's last row is picked (greedy, with logprobs) and whose
// chunks score some of their rows; `scoring` answers it with ForwardSample, `twin` (the same
// model, the same slots) with every row's logits, from which the host scores the same rows.
void ExpectDeviceScoresMatchTheHost(ModelBackend& scoring, ModelBackend& twin,
                                    std::span<const SlotChunk> chunks,
                                    const std::vector<std::vector<int32_t>>& next) {
  const int32_t vocab = static_cast<int32_t>(scoring.spec().vocab_size);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  auto sampler = Sampler::Create(greedy, vocab);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  constexpr int32_t kTop = 4;
  std::vector<TokenPick> picks(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    picks[i].score_next = next[i];
    picks[i].score_top_logprobs = kTop;
  }
  picks[0].sampler = &*sampler;
  picks[0].prompt = chunks[0].tokens;
  picks[0].logprobs = true;
  picks[0].top_logprobs = 2;
  std::vector<PickedToken> picked;
  const absl::Status sampled = scoring.ForwardSample(chunks, picks, &picked);
  ASSERT_TRUE(sampled.ok()) << sampled;
  std::vector<float> logits;
  const absl::Status all = twin.Forward(chunks, LogitsFor::kAllTokens, &logits);
  ASSERT_TRUE(all.ok()) << all;
  auto row = [&](int64_t r) { return std::span<const float>(logits).subspan(r * vocab, vocab); };

  int64_t first = 0, rows = 0;
  double max_error = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    ASSERT_EQ(picked[i].scored.size(), next[i].size()) << "chunk " << i;
    for (size_t r = 0; r < next[i].size(); ++r) {
      const PickedToken want = ScoreOnHost(row(first + r), next[i][r], kTop);
      const PickedToken& got = picked[i].scored[r];
      EXPECT_EQ(got.token, next[i][r]);
      max_error = std::max(max_error, double(std::abs(got.logprob - want.logprob)));
      EXPECT_NEAR(got.rank, want.rank, 1) << "chunk " << i << " row " << r;
      ASSERT_EQ(got.top.size(), want.top.size());
      for (size_t k = 0; k < want.top.size(); ++k) {
        EXPECT_NEAR(got.top[k].second, want.top[k].second, 1e-4);
      }
      ++rows;
    }
    first += static_cast<int64_t>(chunks[i].tokens.size());
  }
  const int64_t last = static_cast<int64_t>(chunks[0].tokens.size()) - 1;
  const PickedToken pick = PickOnHost(picks[0], row(last));
  EXPECT_EQ(picked[0].token, pick.token);
  EXPECT_NEAR(picked[0].logprob, pick.logprob, 1e-4);
  std::printf("%lld scored rows: largest logprob difference from the host %.3e\n",
              static_cast<long long>(rows), max_error);
  EXPECT_LT(max_error, 1e-4);
}

// Three chunks: a long prompt piece scoring all but its last row, a short one scoring all its
// rows (its prompt goes on), and one token scoring none.
struct ScoringStep {
  std::vector<std::vector<int32_t>> tokens, next;
};

ScoringStep MakeStep(int32_t vocab) {
  ScoringStep s;
  s.tokens = {testing::Ids(70, 1, vocab), testing::Ids(9, 2, vocab), testing::Ids(1, 3, vocab)};
  s.next = {std::vector<int32_t>(s.tokens[0].begin() + 1, s.tokens[0].end()),
            testing::Ids(9, 4, vocab),
            {}};
  return s;
}

TEST(CudaPromptScoringTest, MesaNetScoredRowsMatchTheHost) {
  SKIP_WITHOUT_GPU();
  const MesaNetConfig config = testing::SmallMesaNetConfig();
  const MesaNetWeights weights = RandomMesaNetWeights(config, 7);
  std::vector<std::unique_ptr<CudaBackend>> twins;
  for (int i = 0; i < 2; ++i) {
    auto gpu = CudaBackend::Create(config, weights, {.num_slots = 3});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    twins.push_back(std::move(*gpu));
  }
  const ScoringStep s = MakeStep(static_cast<int32_t>(config.vocab_size));
  std::vector<SlotChunk> chunks;
  for (int i = 0; i < 3; ++i)
    chunks.push_back({.slot = i, .tokens = s.tokens[i], .solver = {0, 30}});
  ExpectDeviceScoresMatchTheHost(*twins[0], *twins[1], chunks, s.next);
}

TEST(CudaPromptScoringTest, HybridScoredRowsMatchTheHost) {
  SKIP_WITHOUT_GPU();
  auto model = testing::SmallHybridModel({"GKA-*-SWA", 64, 4, 2, 24});
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<std::unique_ptr<CudaHybridBackend>> twins;
  for (int i = 0; i < 2; ++i) {
    auto gpu = CudaHybridBackend::Create((*model)->spec(), *(*model)->hybrid_weights(),
                                         {.num_slots = 3, .num_kv_blocks = 32});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    twins.push_back(std::move(*gpu));
  }
  const ScoringStep s = MakeStep(static_cast<int32_t>((*model)->spec().vocab_size));
  const std::vector<std::vector<int32_t>> blocks = {{3, 9, 1, 30, 12}, {5}, {7}};
  std::vector<SlotChunk> chunks;
  for (int i = 0; i < 3; ++i) {
    chunks.push_back({.slot = i, .tokens = s.tokens[i], .solver = {0, 30}, .kv_blocks = blocks[i]});
  }
  ExpectDeviceScoresMatchTheHost(*twins[0], *twins[1], chunks, s.next);
}

// The engine on the GPU scores a prompt as the CPU engine does (which matches the float64
// reference of the spec: prompt_logprobs_golden_test), the prompt in pieces beside another
// request; the device's bf16 products keep it within a few hundredths.
TEST(CudaPromptScoringTest, EngineAgreesWithTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  auto model = testing::SmallHybridModel({"GKA-*-SWA", 64, 4, 2, 24});
  ASSERT_TRUE(model.ok()) << model.status();
  const int32_t vocab = static_cast<int32_t>((*model)->spec().vocab_size);
  auto gpu = CudaHybridBackend::Create((*model)->spec(), *(*model)->hybrid_weights(),
                                       {.num_slots = 2, .num_kv_blocks = 64});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const EngineOptions options{.max_slots = 2, .prefill_token_budget = 40};
  auto on_gpu = Engine::Create(gpu->get(), options, nullptr);
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
  auto on_cpu = Engine::Create(model->get(), options, nullptr);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  const std::vector<int32_t> prompt = testing::Ids(150, 5, vocab);
  std::vector<std::vector<LogprobEntry>> got;
  for (Engine* engine : {on_gpu->get(), on_cpu->get()}) {
    EngineRequest other;
    other.prompt = {prompt[5], prompt[4]};
    other.sampling.max_tokens = 30;
    other.sampling.ignore_eos = true;
    auto other_sink = std::make_shared<testing::CollectingSink>();
    ASSERT_TRUE(engine->Submit(std::move(other), other_sink).ok());
    EngineRequest scoring;
    scoring.prompt = prompt;
    scoring.sampling.max_tokens = 1;
    scoring.prompt_logprobs = 2;
    auto sink = std::make_shared<testing::CollectingSink>();
    ASSERT_TRUE(engine->Submit(std::move(scoring), sink).ok());
    ASSERT_TRUE(sink->Wait().status.ok());
    other_sink->Wait();
    got.push_back(sink->prompt_logprobs());
    ASSERT_EQ(got.back().size(), prompt.size() - 1);
  }
  double max_error = 0;
  for (size_t t = 0; t < got[0].size(); ++t) {
    ASSERT_EQ(got[0][t].token, prompt[t + 1]);
    max_error = std::max(max_error, double(std::abs(got[0][t].logprob - got[1][t].logprob)));
  }
  std::printf("engine on the GPU: %zu prompt logprobs, largest difference from the CPU %.3e\n",
              got[0].size(), max_error);
  EXPECT_LT(max_error, 5e-2);
}

}  // namespace
}  // namespace ridge
