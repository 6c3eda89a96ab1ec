// CUDA graphs of the hybrid backend's decode steps (models/cuda/step_graphs.h): a backend that
// replays captured steps (padded to their batch bucket with sequences on a scratch slot and KV
// block) against one that launches every step, on the same random hybrid_qwen3 checkpoint, fed
// the same tokens: batches that move between buckets and come back, all three mixers (GKA, full
// attention, sliding window), bf16 and fp8 KV, and every output (logits, greedy picks, sampled
// picks). The padding must leave every caller's slot, block and output as the launched steps do.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <tuple>
#include <vector>

#include "kernels/device_info.h"
#include "models/cuda/hybrid_backend.h"
#include "sampling/sampler.h"
#include "tests/gpu/small_models.h"

namespace ridge {
namespace {

double RelativeRms(std::span<const float> a, std::span<const float> ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += double(a[i] - ref[i]) * (a[i] - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

int32_t Argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

const testing::HybridShape kShapes[] = {{"GKA-*-GKA-SWA", 64, 4, 2, 24}, {"*-GKA-*", 128, 8, 2, 0}};

class CudaHybridGraphTest
    : public ::testing::TestWithParam<std::tuple<testing::HybridShape, KvCacheDtype>> {};

TEST_P(CudaHybridGraphTest, ReplayedDecodeStepsMatchLaunchedOnes) {
  const auto& [shape, kv_dtype] = GetParam();
  const bool fp8 = kv_dtype == KvCacheDtype::kFp8E4m3;
  auto model = testing::SmallHybridModel(shape);
  ASSERT_TRUE(model.ok()) << model.status();
  if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here";
  const ModelSpec& spec = (*model)->spec();
  const int64_t vocab = spec.vocab_size;
  constexpr int kSeqs = 7, kBlocksEach = 10;
  auto create = [&](bool graphs) {
    return CudaHybridBackend::Create(spec, *(*model)->hybrid_weights(),
                                     {.num_slots = kSeqs,
                                      .num_kv_blocks = kSeqs * kBlocksEach,
                                      .kv_cache_dtype = kv_dtype,
                                      .use_graphs = graphs});
  };
  auto launched = create(false);
  auto replayed = create(true);
  ASSERT_TRUE(launched.ok()) << launched.status();
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  CudaHybridBackend* backends[] = {launched->get(), replayed->get()};

  const bool paged = !(*launched)->kv_layout().empty();
  std::vector<std::vector<int32_t>> tables(kSeqs), prompts(kSeqs), generated(kSeqs);
  for (int b = 0; b < kBlocksEach; ++b) {
    for (int s = 0; s < kSeqs; ++s) tables[s].push_back(b * kSeqs + (s + 3 * b) % kSeqs);
  }
  for (int s = 0; s < kSeqs; ++s) {
    for (int t = 0; t < 20 + 9 * s; ++t) prompts[s].push_back((t * 29 + s * 11 + 3) % vocab);
  }
  auto chunk = [&](int s, std::span<const int32_t> tokens, SolvePhase phase) {
    return SlotChunk{
        .slot = s,
        .tokens = tokens,
        .solver = {1e-4f, 30},
        .phase = phase,
        .kv_blocks = paged ? std::span<const int32_t>(tables[s]) : std::span<const int32_t>()};
  };
  std::vector<int32_t> next(kSeqs);
  for (CudaHybridBackend* b : backends) {
    std::vector<SlotChunk> prefill;
    for (int s = 0; s < kSeqs; ++s) prefill.push_back(chunk(s, prompts[s], SolvePhase::kPrefill));
    ASSERT_TRUE(b->ForwardGreedy(prefill, &next).ok());
  }

  std::vector<Sampler> samplers;
  for (int s = 0; s < kSeqs; ++s) {
    SamplingParams params;
    params.temperature = 0.8f;
    params.top_p = 0.95f;
    auto sampler = Sampler::Create(params, static_cast<int32_t>(vocab));
    ASSERT_TRUE(sampler.ok());
    samplers.push_back(std::move(*sampler));
  }
  std::mt19937_64 rng(11);

  // Buckets 8, 4, 8 again, 1, 8 (five sequences); each phase asks for each output in turn,
  // twice in a row where it is long enough. A (bucket, output, keys) graph is captured on its
  // key's second step and replayed from then on, also when the batch comes back to its bucket.
  // Every row here attends to 65-128 keys: one keys bucket throughout.
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6}, odd = {1, 3, 5}, one = {4},
                         five = {6, 0, 2, 5, 1};
  struct Step {
    const std::vector<int>* batch;
    int output;  // 0 logits, 1 greedy picks, 2 sampled picks
  };
  std::vector<Step> schedule;
  for (const auto& [batch, steps] : std::vector<std::pair<const std::vector<int>*, int>>{
           {&all, 6}, {&odd, 6}, {&all, 3}, {&one, 6}, {&five, 3}}) {
    for (int i = 0; i < steps; ++i) schedule.push_back({batch, i * 3 / steps});
  }
  // Replays: the second of each pair in the first, second and fourth phases (3 each), every
  // step of the third and fifth (their keys were captured before).
  constexpr int64_t kExpectedReplays = 15;
  const double logit_bound = fp8 ? 3e-3 : 1e-4;
  int agree = 0, picks_total = 0;
  double worst = 0;
  for (size_t step = 0; step < schedule.size(); ++step) {
    const std::vector<int>& batch = *schedule[step].batch;
    std::vector<SlotChunk> chunks;
    for (int s : batch) chunks.push_back(chunk(s, {&next[s], 1}, SolvePhase::kDecode));
    const int kind = schedule[step].output;
    std::vector<int32_t> chosen(batch.size());
    if (kind == 0) {  // logits
      std::vector<float> a, b;
      ASSERT_TRUE((*launched)->Forward(chunks, LogitsFor::kLastToken, &a).ok());
      ASSERT_TRUE((*replayed)->Forward(chunks, LogitsFor::kLastToken, &b).ok());
      ASSERT_EQ(a.size(), batch.size() * vocab);
      ASSERT_EQ(b.size(), a.size());
      const double rms = RelativeRms(b, a);
      worst = std::max(worst, rms);
      EXPECT_LT(rms, logit_bound) << "step " << step;
      for (size_t i = 0; i < batch.size(); ++i) {
        chosen[i] = Argmax(std::span<const float>(a).subspan(i * vocab, vocab));
      }
    } else if (kind == 1) {  // greedy picks
      std::vector<int32_t> a, b;
      ASSERT_TRUE((*launched)->ForwardGreedy(chunks, &a).ok());
      ASSERT_TRUE((*replayed)->ForwardGreedy(chunks, &b).ok());
      ASSERT_EQ(a.size(), batch.size());
      ASSERT_EQ(b.size(), batch.size());
      for (size_t i = 0; i < batch.size(); ++i) agree += a[i] == b[i] ? 1 : 0;
      picks_total += static_cast<int>(batch.size());
      chosen = a;
    } else {  // sampled picks, the same uniforms on both
      std::vector<TokenPick> picks;
      for (int s : batch) {
        const double uniform = static_cast<double>(rng() >> 11) * 0x1p-53;
        picks.push_back({&samplers[s], uniform, prompts[s], generated[s], false, 0});
      }
      std::vector<PickedToken> a, b;
      ASSERT_TRUE((*launched)->ForwardSample(chunks, picks, &a).ok());
      ASSERT_TRUE((*replayed)->ForwardSample(chunks, picks, &b).ok());
      ASSERT_EQ(a.size(), batch.size());
      ASSERT_EQ(b.size(), batch.size());
      for (size_t i = 0; i < batch.size(); ++i) {
        agree += a[i].token == b[i].token ? 1 : 0;
        chosen[i] = a[i].token;
      }
      picks_total += static_cast<int>(batch.size());
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      next[batch[i]] = chosen[i];
      generated[batch[i]].push_back(chosen[i]);
    }
  }
  EXPECT_GE(agree, picks_total * 9 / 10) << agree << " of " << picks_total << " picks agree";
  EXPECT_EQ((*launched)->graph_replays(), 0);
  EXPECT_EQ((*replayed)->graph_replays(), kExpectedReplays);

  for (int s = 0; s < kSeqs; ++s) {
    EXPECT_EQ((*replayed)->SlotPosition(s), (*launched)->SlotPosition(s)) << "slot " << s;
    std::vector<float> a, b;
    ASSERT_TRUE((*launched)->ReadSlot(s, &a).ok());
    ASSERT_TRUE((*replayed)->ReadSlot(s, &b).ok());
    if (a.empty()) continue;
    EXPECT_LT(RelativeRms(b, a), fp8 ? 1e-2 : 1e-4) << "slot " << s << "'s state";
  }
  std::printf(
      "%s KV: logits' largest relative RMS difference %.2e; %d of %d picks agree; %lld "
      "steps replayed\n",
      fp8 ? "fp8" : "bf16", worst, agree, picks_total,
      static_cast<long long>((*replayed)->graph_replays()));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaHybridGraphTest,
                         ::testing::Combine(::testing::ValuesIn(kShapes),
                                            ::testing::Values(KvCacheDtype::kBf16,
                                                              KvCacheDtype::kFp8E4m3)));

}  // namespace
}  // namespace ridge
