// The serving engine on the CUDA backend: concurrent requests with chunked prompts finish, and
// their greedy tokens agree with the CPU engine on the same (bf16-rounded) weights. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>

#include "engine/engine.h"
#include "engine/offline_generation.h"
#include "kernels/device_info.h"
#include "models/cuda/cuda_backend.h"
#include "models/mesanet_model.h"
#include "sampling/json_constraint.h"
#include "tests/gpu/small_models.h"
#include "tests/support/bf16_weights.h"
#include "tests/support/collecting_sink.h"

namespace ridge {
namespace {

using namespace std::chrono_literals;
using testing::CollectingSink;

MesaNetConfig SmallConfig() { return testing::SmallMesaNetConfig(); }

// Random weights with the matrices rounded to bf16, so the CPU runs what the GPU holds.
MesaNetWeights Bf16RoundedWeights(const MesaNetConfig& config) {
  MesaNetWeights weights = RandomMesaNetWeights(config, 11);
  testing::RoundMatricesToBf16(weights);
  return weights;
}

TEST(CudaEngineTest, ConcurrentRequestsFinishAndAgreeWithTheCpu) {
  if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here";
  const MesaNetConfig config = SmallConfig();
  const MesaNetWeights weights = Bf16RoundedWeights(config);
  const MesaNetModel cpu_model(config, weights);
  auto gpu = CudaBackend::Create(config, weights, {.num_slots = 4});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  // A small prefill budget splits prompts over steps while other sequences decode.
  auto engine = Engine::Create(gpu->get(), {.max_slots = 4, .prefill_token_budget = 9}, nullptr);
  ASSERT_TRUE(engine.ok()) << engine.status();

  std::vector<GenerationRequest> offline;
  std::vector<std::shared_ptr<CollectingSink>> sinks;
  for (int i = 0; i < 6; ++i) {
    EngineRequest r;
    for (int t = 0; t < 4 + 7 * i; ++t) r.prompt.push_back((t * 13 + i * 5) % 300);
    r.sampling.max_tokens = 5 + i;
    r.sampling.temperature = 0.0f;
    offline.push_back({r.prompt, r.sampling, SolverOptions{}});
    sinks.push_back(std::make_shared<CollectingSink>());
    ASSERT_TRUE((*engine)->Submit(r, sinks.back()).ok());
  }
  auto expected = GenerateOffline(cpu_model, offline, nullptr);
  ASSERT_TRUE(expected.ok());
  int first_tokens_agree = 0;
  for (int i = 0; i < 6; ++i) {
    const RequestEvent last = sinks[i]->Wait();
    EXPECT_TRUE(last.status.ok()) << last.status;
    EXPECT_EQ(last.finish_reason, FinishReason::kLength);
    const std::vector<int32_t> tokens = sinks[i]->tokens();
    ASSERT_EQ(tokens.size(), static_cast<size_t>(5 + i));
    EXPECT_GT(last.usage.decode_solver.solves, 0);
    first_tokens_agree += tokens[0] == (*expected)[i].tokens[0];
    std::printf("request %d: gpu", i);
    for (int32_t t : tokens) std::printf(" %d", t);
    std::printf(" | cpu");
    for (int32_t t : (*expected)[i].tokens) std::printf(" %d", t);
    std::printf("\n");
  }
  // bf16 activations on the GPU may flip a near-tie; a wrong model would disagree everywhere.
  EXPECT_GE(first_tokens_agree, 5);
  EXPECT_TRUE((*engine)->WaitIdle(std::chrono::steady_clock::now() + 10s));

  // Offline generation (the generate command) on the GPU gives the engine's tokens.
  auto offline_gpu = CudaBackend::Create(config, weights, {.num_slots = 6});
  ASSERT_TRUE(offline_gpu.ok()) << offline_gpu.status();
  auto generated = GenerateOffline(**offline_gpu, offline, nullptr);
  ASSERT_TRUE(generated.ok()) << generated.status();
  int same = 0;
  for (int i = 0; i < 6; ++i) same += (*generated)[i].tokens == sinks[i]->tokens();
  EXPECT_GE(same, 5);
  EXPECT_FALSE(GenerateOffline(**gpu, offline, nullptr).ok()) << "6 requests, 4 slots";
}

// Sampled requests are sampled on the GPU: a seed fixes the tokens (two requests with the same
// seed, in the same steps, get the same ones), logprobs come back for every token, and a greedy
// request in the same steps is unaffected by its neighbours' sampling, nor by requests sampled
// on the host (a logit bias, JSON mode).
TEST(CudaEngineTest, SampledRequestsWithSeedsAndLogprobs) {
  if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here";
  const MesaNetConfig config = SmallConfig();
  const MesaNetWeights weights = Bf16RoundedWeights(config);
  auto gpu = CudaBackend::Create(config, weights, {.num_slots = 4});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto engine = Engine::Create(gpu->get(), {.max_slots = 4}, nullptr);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto run = [&](const std::vector<EngineRequest>& requests) {
    std::vector<std::shared_ptr<CollectingSink>> sinks;
    for (const EngineRequest& r : requests) {
      sinks.push_back(std::make_shared<CollectingSink>());
      EXPECT_TRUE((*engine)->Submit(r, sinks.back()).ok());
    }
    for (auto& sink : sinks) EXPECT_TRUE(sink->Wait().status.ok());
    return sinks;
  };
  EngineRequest sampled;
  for (int t = 0; t < 40; ++t) sampled.prompt.push_back((t * 11 + 3) % 300);
  sampled.sampling.max_tokens = 12;
  sampled.sampling.temperature = 1.3f;
  sampled.sampling.top_p = 0.95f;
  sampled.sampling.repetition_penalty = 1.2f;
  sampled.sampling.seed = 1234;
  sampled.logprobs = true;
  sampled.top_logprobs = 3;
  EngineRequest greedy;
  greedy.prompt = sampled.prompt;
  greedy.sampling.max_tokens = 12;
  greedy.sampling.temperature = 0.0f;

  const auto alone = run({greedy});
  const auto together = run({sampled, sampled, greedy});
  EXPECT_EQ(together[0]->tokens(), together[1]->tokens());
  EXPECT_EQ(together[2]->tokens(), alone[0]->tokens());
  const std::vector<int32_t> tokens = together[0]->tokens();
  const std::vector<LogprobEntry> logprobs = together[0]->logprobs();
  ASSERT_EQ(tokens.size(), 12u);
  ASSERT_EQ(logprobs.size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(logprobs[i].token, tokens[i]);
    EXPECT_LE(logprobs[i].logprob, 0.0f);
    ASSERT_EQ(logprobs[i].top.size(), 3u);
    EXPECT_GE(logprobs[i].top[0].second, logprobs[i].top[1].second);
    EXPECT_GE(logprobs[i].top[1].second, logprobs[i].top[2].second);
    EXPECT_LE(logprobs[i].logprob, logprobs[i].top[0].second + 1e-6f);
  }
  std::set<int32_t> distinct(tokens.begin(), tokens.end());
  EXPECT_GT(distinct.size(), 3u) << "temperature 1.3 over 300 tokens should not repeat itself";

  // A logit bias (sampled on the host; the device's sampler knows none) beside plain requests:
  // +100 makes token 7 certain, -100 bans the greedy pick.
  EngineRequest forced = sampled;
  forced.sampling.logit_bias = {{7, 100.0f}};
  EngineRequest banned = greedy;
  banned.sampling.logit_bias = {{alone[0]->tokens()[0], -100.0f}};
  const auto biased = run({forced, banned, greedy});
  EXPECT_EQ(biased[0]->tokens(), std::vector<int32_t>(12, 7));
  ASSERT_FALSE(biased[1]->tokens().empty());
  EXPECT_NE(biased[1]->tokens()[0], alone[0]->tokens()[0]);
  EXPECT_EQ(biased[2]->tokens(), alone[0]->tokens());
  // Beside a biased request the seeded one draws what it drew beside its twin. (Its
  // log-probabilities agree only within the rounding of a different step composition: the
  // engine admits requests as they come, so which steps they share varies from run to run.
  // CudaHybridSamplingTest checks at the backend, one step, that such rows are the device's
  // picks.)
  const auto beside_bias = run({forced, sampled, greedy});
  EXPECT_EQ(beside_bias[1]->tokens(), tokens);
  ASSERT_EQ(beside_bias[1]->logprobs().size(), logprobs.size());
  for (size_t i = 0; i < logprobs.size(); ++i) {
    EXPECT_NEAR(beside_bias[1]->logprobs()[i].logprob, logprobs[i].logprob, 2e-2) << i;
  }

  // JSON mode (also sampled on the host) beside the greedy request: its tokens spell what can
  // still become one JSON object (the whole object if it ended on its own). Ids 0-94 are the
  // printable ASCII characters; the others have no bytes, and the last ends the output.
  const auto vocab = static_cast<int32_t>(config.vocab_size);
  std::vector<std::string> bytes(vocab);
  for (int32_t id = 0; id < 95 && id < vocab; ++id) {
    bytes[id] = std::string(1, static_cast<char>(0x20 + id));
  }
  auto vocabulary = JsonVocabulary::Create(bytes);
  ASSERT_TRUE(vocabulary.ok()) << vocabulary.status();
  EngineRequest json = sampled;
  json.sampling.max_tokens = 60;
  json.sampling.json_output = *vocabulary;
  json.sampling.stop_token_ids = {vocab - 1};
  json.logprobs = false;
  const auto constrained = run({json, greedy});
  EXPECT_EQ(constrained[1]->tokens(), alone[0]->tokens());
  const RequestEvent json_final = constrained[0]->Wait();
  JsonByteState state;
  std::string text;
  for (int32_t token : constrained[0]->tokens()) {
    ASSERT_LT(token, 95) << "a token without bytes inside the object";
    text += bytes[token];
    ASSERT_TRUE(state.Step(static_cast<uint8_t>(bytes[token][0]))) << text;
  }
  EXPECT_EQ(state.complete(), json_final.finish_reason != FinishReason::kLength) << text;
  std::printf("JSON output: %s (%s)\n", text.c_str(), FinishReasonName(json_final.finish_reason));

  // min_tokens (picked on the host while it holds the end tokens off) beside the greedy request:
  // a greedy run's first 6 tokens as stop tokens end it at once without min_tokens; with
  // min_tokens 6 it gives 6 tokens, none of them a stop token, and the greedy request is as alone.
  EngineRequest held = greedy;
  held.sampling.ignore_eos = true;
  const std::vector<int32_t> free_run = run({held})[0]->tokens();
  ASSERT_EQ(free_run.size(), 12u);
  held.sampling.stop_token_ids.assign(free_run.begin(), free_run.begin() + 6);
  EXPECT_TRUE(run({held})[0]->tokens().empty());
  held.sampling.min_tokens = 6;
  const auto min_tokens = run({held, greedy});
  EXPECT_EQ(min_tokens[1]->tokens(), alone[0]->tokens());
  const std::vector<int32_t> held_tokens = min_tokens[0]->tokens();
  ASSERT_GE(held_tokens.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(std::count(held.sampling.stop_token_ids.begin(), held.sampling.stop_token_ids.end(),
                         held_tokens[i]),
              0)
        << "a stop token at " << i;
  }
  EXPECT_TRUE((*engine)->WaitIdle(std::chrono::steady_clock::now() + 10s));
}

}  // namespace
}  // namespace ridge
