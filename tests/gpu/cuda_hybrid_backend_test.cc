// The CUDA hybrid backend (models/cuda/hybrid_backend.h) against the CPU backend on the same
// random hybrid_qwen3 checkpoints (bf16 weights; the CPU backend matches the float64 goldens):
// patterns with GKA, full attention and sliding-window layers; GQA groups 1, 2 and 4; head sizes
// 64 and 128; three sequences of different lengths in one step with scattered KV blocks; prompts
// split across steps and across 16-token blocks and the window; then greedy decode steps, at
// tolerances 0, 1e-3 and 1e-6 and caps of 1 and 30 iterations. Also the engine end to end, and
// the shapes Create refuses. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <sstream>
#include <tuple>

#include "engine/engine.h"
#include "engine/offline_generation.h"
#include "kernels/cuda/row_kernels.h"
#include "kernels/device_info.h"
#include "kernels/gka_slot_layout.h"
#include "models/arch/hybrid_qwen3.h"
#include "models/arch/hybrid_qwen3_config.h"
#include "models/cpu_backend.h"
#include "models/cuda/hybrid_backend.h"
#include "nlohmann/json.hpp"
#include "sampling/sampler.h"
#include "tests/gpu/small_models.h"
#include "tests/support/collecting_sink.h"

namespace ridge {
namespace {

struct Case {
  const char* pattern;
  int head_dim, q_heads, kv_heads, window;
  float tolerance;
  int max_iterations;
};

using CaseAndKv = std::tuple<Case, KvCacheDtype>;

std::string Name(const ::testing::TestParamInfo<CaseAndKv>& info) {
  const Case& c = std::get<0>(info.param);
  std::ostringstream name;
  for (const char* p = c.pattern; *p != 0; ++p) {
    name << (*p == '*' ? 'A' : *p == '-' ? '_' : *p);
  }
  name << "_d" << c.head_dim << "_q" << c.q_heads << "kv" << c.kv_heads << "_it" << c.max_iterations
       << "_tol" << (c.tolerance > 0 ? -std::lround(std::log10(c.tolerance)) : 0)
       << (std::get<1>(info.param) == KvCacheDtype::kFp8E4m3 ? "_fp8" : "_bf16");
  return name.str();
}

using testing::Widths;

absl::StatusOr<std::unique_ptr<HybridQwen3Model>> SmallModel(const Case& c, Widths w = {}) {
  return testing::SmallHybridModel({c.pattern, c.head_dim, c.q_heads, c.kv_heads, c.window}, w);
}

double RelativeRms(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += double(a[i] - ref[i]) * (a[i] - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

class CudaHybridBackendTest : public ::testing::TestWithParam<CaseAndKv> {};

// With an fp8 KV cache (3 mantissa bits) the bounds are looser; the test prints the differences.
TEST_P(CudaHybridBackendTest, AgreesWithTheCpuBackend) {
  const Case& c = std::get<0>(GetParam());
  const KvCacheDtype kv_dtype = std::get<1>(GetParam());
  const bool fp8 = kv_dtype == KvCacheDtype::kFp8E4m3;
  const double prompt_bound = fp8 ? 0.1 : 2e-2, decode_bound = fp8 ? 0.12 : 3e-2;
  auto model = SmallModel(c);
  ASSERT_TRUE(model.ok()) << model.status();
  if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here";
  const ModelSpec& spec = (*model)->spec();
  constexpr int kSeqs = 3, kBlocksEach = 12;
  CpuBackend cpu(&(*model)->decoder(), kSeqs, kSeqs * kBlocksEach);
  auto gpu = CudaHybridBackend::Create(spec, *(*model)->hybrid_weights(),
                                       {.num_slots = kSeqs + 1,
                                        .num_kv_blocks = kSeqs * kBlocksEach + 4,
                                        .kv_cache_dtype = kv_dtype});
  ASSERT_TRUE(gpu.ok()) << gpu.status();

  // Scattered, interleaved block tables (the same on both sides); the GPU's slots out of order.
  std::vector<std::vector<int32_t>> tables(kSeqs);
  for (int b = 0; b < kBlocksEach; ++b) {
    for (int s = 0; s < kSeqs; ++s) tables[s].push_back((b * kSeqs + (s + b) % kSeqs));
  }
  const int64_t gpu_slot[kSeqs] = {3, 0, 2};
  const bool paged = !(*model)->decoder().kv_layout().empty();
  std::vector<std::vector<int32_t>> prompts(kSeqs);
  for (int s = 0; s < kSeqs; ++s) {
    for (int t = 0; t < 37 + 23 * s; ++t) prompts[s].push_back((t * 31 + s * 7 + 1) % 384);
  }
  std::vector<SolverStats> cpu_stats(kSeqs), gpu_stats(kSeqs);
  auto chunks_for = [&](const std::vector<std::span<const int32_t>>& tokens, bool on_gpu,
                        SolvePhase phase) {
    std::vector<SlotChunk> chunks;
    for (int s = 0; s < kSeqs; ++s) {
      if (tokens[s].empty()) continue;
      chunks.push_back(
          {.slot = on_gpu ? gpu_slot[s] : s,
           .tokens = tokens[s],
           .solver = {c.tolerance, c.max_iterations},
           .stats = on_gpu ? &gpu_stats[s] : &cpu_stats[s],
           .phase = phase,
           .kv_blocks = paged ? std::span<const int32_t>(tables[s]) : std::span<const int32_t>()});
    }
    return chunks;
  };
  // The prompts in two steps: a first piece of 25 tokens each (all rows' logits compared), then
  // the rest (last rows).
  std::vector<std::span<const int32_t>> first(kSeqs), rest(kSeqs);
  for (int s = 0; s < kSeqs; ++s) {
    first[s] = std::span<const int32_t>(prompts[s]).first(25);
    rest[s] = std::span<const int32_t>(prompts[s]).subspan(25);
  }
  std::vector<float> cpu_logits, gpu_logits;
  ASSERT_TRUE(cpu.Forward(chunks_for(first, false, SolvePhase::kPrefill), LogitsFor::kAllTokens,
                          &cpu_logits)
                  .ok());
  ASSERT_TRUE((*gpu)
                  ->Forward(chunks_for(first, true, SolvePhase::kPrefill), LogitsFor::kAllTokens,
                            &gpu_logits)
                  .ok());
  ASSERT_EQ(cpu_logits.size(), gpu_logits.size());
  const double first_rms = RelativeRms(gpu_logits, cpu_logits);
  EXPECT_LT(first_rms, prompt_bound) << "first prompt pieces";
  ASSERT_TRUE(
      cpu.Forward(chunks_for(rest, false, SolvePhase::kPrefill), LogitsFor::kLastToken, &cpu_logits)
          .ok());
  ASSERT_TRUE((*gpu)
                  ->Forward(chunks_for(rest, true, SolvePhase::kPrefill), LogitsFor::kLastToken,
                            &gpu_logits)
                  .ok());
  const double rest_rms = RelativeRms(gpu_logits, cpu_logits);
  EXPECT_LT(rest_rms, prompt_bound) << "rest of the prompts";

  // Greedy decode, both fed the CPU's choice; the GPU's greedy pick agrees on most steps.
  int agree = 0, steps = 0;
  std::vector<int32_t> next(kSeqs);
  for (int step = 0; step < 12; ++step) {
    for (int s = 0; s < kSeqs; ++s) {
      const float* row = &cpu_logits[s * spec.vocab_size];
      next[s] = static_cast<int32_t>(std::max_element(row, row + spec.vocab_size) - row);
    }
    std::vector<std::span<const int32_t>> tokens(kSeqs);
    for (int s = 0; s < kSeqs; ++s) tokens[s] = std::span<const int32_t>(&next[s], 1);
    std::vector<int32_t> gpu_greedy;
    ASSERT_TRUE(
        (*gpu)->ForwardGreedy(chunks_for(tokens, true, SolvePhase::kDecode), &gpu_greedy).ok());
    // Roll the GPU back by replaying is not possible: compare its pick with the CPU's next one.
    ASSERT_TRUE(cpu.Forward(chunks_for(tokens, false, SolvePhase::kDecode), LogitsFor::kLastToken,
                            &cpu_logits)
                    .ok());
    for (int s = 0; s < kSeqs; ++s) {
      const float* row = &cpu_logits[s * spec.vocab_size];
      const int32_t want = static_cast<int32_t>(std::max_element(row, row + spec.vocab_size) - row);
      agree += gpu_greedy[s] == want ? 1 : 0;
      ++steps;
    }
  }
  EXPECT_GE(agree, steps * (fp8 ? 7 : 9) / 10) << agree << " of " << steps << " greedy picks agree";
  // One more decode step with logits, compared.
  std::vector<std::span<const int32_t>> tokens(kSeqs);
  for (int s = 0; s < kSeqs; ++s) tokens[s] = std::span<const int32_t>(&next[s], 1);
  std::vector<float> cpu_last, gpu_last;
  ASSERT_TRUE(
      cpu.Forward(chunks_for(tokens, false, SolvePhase::kDecode), LogitsFor::kLastToken, &cpu_last)
          .ok());
  ASSERT_TRUE(
      (*gpu)
          ->Forward(chunks_for(tokens, true, SolvePhase::kDecode), LogitsFor::kLastToken, &gpu_last)
          .ok());
  const double decode_rms = RelativeRms(gpu_last, cpu_last);
  EXPECT_LT(decode_rms, decode_bound) << "a decode step";
  std::printf(
      "%s KV: logits' relative RMS difference from the CPU: prompt pieces %.4f, %.4f, "
      "decode %.4f; greedy picks %d of %d\n",
      fp8 ? "fp8" : "bf16", first_rms, rest_rms, decode_rms, agree, steps);
  for (int s = 0; s < kSeqs; ++s) {
    EXPECT_EQ((*gpu)->SlotPosition(gpu_slot[s]), cpu.SlotPosition(s));
    if (!std::strstr(c.pattern, "GKA")) continue;
    EXPECT_EQ(gpu_stats[s].solves, cpu_stats[s].solves) << "sequence " << s;
    EXPECT_NEAR(static_cast<double>(gpu_stats[s].total_iterations),
                static_cast<double>(cpu_stats[s].total_iterations),
                0.05 * cpu_stats[s].total_iterations + 2)
        << "sequence " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Patterns, CudaHybridBackendTest,
    ::testing::Combine(::testing::Values(Case{"GKA-*-GKA-SWA", 64, 4, 2, 24, 0.0f, 30},
                                         Case{"SWA-GKA-*", 64, 4, 1, 20, 1e-3f, 30},
                                         Case{"GKA-*", 128, 4, 4, 0, 1e-6f, 30},
                                         Case{"*-GKA-*", 128, 8, 2, 0, 0.0f, 1},
                                         Case{"GKA-GKA", 64, 2, 2, 0, 1e-3f, 30},
                                         Case{"*-SWA-*", 128, 2, 1, 16, 0.0f, 30}),
                       ::testing::Values(KvCacheDtype::kBf16, KvCacheDtype::kFp8E4m3)),
    Name);

// Host code, runs without a GPU: the pool's slot keeps each GKA layer's Hs packed
// (kernels/gka_slot_layout.h), the rest as the CPU's layout.
TEST(PlanDeviceRecurrentLayoutTest, PacksEachGkaLayersHs) {
  auto model = SmallModel({"GKA-*-GKA-SWA", 64, 4, 2, 24, 0.0f, 30});
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelSpec& spec = (*model)->spec();
  const RecurrentLayout cpu = PlanRecurrentLayout(spec);
  const RecurrentLayout gpu = PlanDeviceRecurrentLayout(spec);
  ASSERT_EQ(gpu.layer_offset.size(), spec.layers.size());
  int64_t expected_offset = 0;
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    const int64_t cpu_floats = RecurrentStateFloats(spec.layers[l].mixer);
    int64_t floats = cpu_floats;
    if (const auto* g = std::get_if<GkaSpec>(&spec.layers[l].mixer)) {
      const int64_t hx = g->expanded_heads(), d = g->head_dim;
      floats = cpu_floats - hx * (d * d - PackedHsFloats(d));  // D^2/2 - 2D fewer a head
      EXPECT_EQ(GkaSlotTailOffset(hx, d) + (cpu_floats - 2 * hx * d * d), floats);
    }
    EXPECT_EQ(gpu.layer_offset[l], floats > 0 ? expected_offset : -1) << "layer " << l;
    expected_offset += floats;
  }
  EXPECT_EQ(gpu.floats_per_slot, expected_offset);
  EXPECT_LT(gpu.floats_per_slot, cpu.floats_per_slot);
}

TEST(CudaHybridBackendCreateTest, RefusesShapesItsKernelsDoNotTake) {
  if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here";
  auto model = SmallModel({"GKA-*", 32, 4, 2, 0, 0.0f, 30});
  ASSERT_TRUE(model.ok()) << model.status();
  auto gpu = CudaHybridBackend::Create((*model)->spec(), *(*model)->hybrid_weights(), {});
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(gpu.status().message().find("head_dim 32"), std::string::npos) << gpu.status();
}

TEST(CudaHybridEngineTest, GreedyRequestsAgreeWithTheCpuEngine) {
  if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here";
  auto model = SmallModel({"GKA-*-GKA-SWA", 64, 4, 2, 24, 0.0f, 30});
  ASSERT_TRUE(model.ok()) << model.status();
  auto gpu = CudaHybridBackend::Create((*model)->spec(), *(*model)->hybrid_weights(),
                                       {.num_slots = 5, .num_kv_blocks = 64});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  CpuBackend cpu(&(*model)->decoder(), 5, 64);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 5; ++i) {
    GenerationRequest r;
    for (int t = 0; t < 5 + 19 * i; ++t) r.prompt.push_back((t * 13 + i * 5) % 384);
    r.sampling.max_tokens = 6 + i;
    r.sampling.temperature = 0.0f;
    requests.push_back(r);
  }
  auto on_gpu = GenerateOffline(**gpu, requests, nullptr);
  auto on_cpu = GenerateOffline(cpu, requests, nullptr);
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  int agree = 0, total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& a = (*on_gpu)[i].tokens;
    const auto& b = (*on_cpu)[i].tokens;
    ASSERT_EQ(a.size(), b.size());
    // Greedy paths may part where two logits are within bf16 rounding; count the common prefix.
    size_t n = 0;
    while (n < a.size() && a[n] == b[n]) ++n;
    agree += static_cast<int>(n);
    total += static_cast<int>(a.size());
  }
  EXPECT_GE(agree, total * 8 / 10) << agree << " of " << total;
}

}  // namespace
}  // namespace ridge

namespace ridge {
namespace {

// One prompt of more than a thousand rows in one step (the server's prefill budget on the GPU
// is 2048 tokens), at hybrid-small-8l's widths, after shorter ones in the same slot and blocks
// (the buffers grow step by step, as in a server): the last logits against the CPU's.
class CudaHybridLongPromptTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaHybridLongPromptTest, OneStepAgreesWithTheCpu) {
  if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here";
  const Widths widths{.hidden = 512, .intermediate = 1536, .vocab = 32000, .rope_theta = 1e6};
  auto model = SmallModel({GetParam(), 64, 8, 2, 0, 0.0f, 30}, widths);
  ASSERT_TRUE(model.ok()) << model.status();
  auto gpu = CudaHybridBackend::Create((*model)->spec(), *(*model)->hybrid_weights(),
                                       {.num_slots = 2, .num_kv_blocks = 4096});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  CpuBackend cpu(&(*model)->decoder(), 2, 4096);
  std::vector<int32_t> table(200);
  for (int i = 0; i < 200; ++i) table[i] = 4000 - 7 * i;
  for (const int length : {1, 130, 517, 1100, 2000}) {
    std::vector<int32_t> ids;
    for (int t = 0; t < length; ++t) ids.push_back((t * 7919 + length) % 31990 + 5);
    std::vector<float> on_gpu, on_cpu;
    ASSERT_TRUE((*gpu)->ResetSlot(1).ok());
    ASSERT_TRUE(cpu.ResetSlot(1).ok());
    // A model without attention layers has no KV blocks, and its chunks carry no table.
    const SlotChunk chunk{.slot = 1,
                          .tokens = ids,
                          .solver = {0.0f, 30},
                          .kv_blocks = (*gpu)->num_kv_blocks() > 0 ? std::span<const int32_t>(table)
                                                                   : std::span<const int32_t>()};
    const absl::Status gpu_status = (*gpu)->Forward({&chunk, 1}, LogitsFor::kLastToken, &on_gpu);
    ASSERT_TRUE(gpu_status.ok()) << gpu_status << " (prompt of " << length << ")";
    ASSERT_TRUE(cpu.Forward({&chunk, 1}, LogitsFor::kLastToken, &on_cpu).ok());
    EXPECT_LT(RelativeRms(on_gpu, on_cpu), 2e-2) << GetParam() << ", prompt of " << length;
  }
}

// A sampled step whose rows need the host (a logit bias) beside rows the device picks: the host
// rows are picked from their own logits (those of a logits step of a twin backend, the same
// kernels and batch), and the device rows are the device's, to the bit, as in a step without host
// rows (the whole step used to be picked on the host).
TEST(CudaHybridSamplingTest, HostRowsBesideDeviceRows) {
  if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here";
  auto model = SmallModel({"GKA-*", 64, 4, 2, 0, 0.0f, 30});
  ASSERT_TRUE(model.ok()) << model.status();
  const int32_t vocab = static_cast<int32_t>((*model)->spec().vocab_size);
  std::vector<std::unique_ptr<CudaHybridBackend>> twins;
  for (int i = 0; i < 3; ++i) {
    auto gpu = CudaHybridBackend::Create((*model)->spec(), *(*model)->hybrid_weights(),
                                         {.num_slots = 3, .num_kv_blocks = 16});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    twins.push_back(std::move(*gpu));
  }
  std::vector<std::vector<int32_t>> prompts(3), blocks(3);
  std::vector<SlotChunk> chunks(3);
  for (int i = 0; i < 3; ++i) {
    for (int t = 0; t < 20 + 9 * i; ++t) prompts[i].push_back((t * 37 + 11 * i) % vocab);
    blocks[i] = {5 * i, 5 * i + 1, 5 * i + 2};
    chunks[i] = {.slot = i, .tokens = prompts[i], .solver = {0.0f, 30}, .kv_blocks = blocks[i]};
  }
  SamplingParams plain;
  plain.temperature = 0.9f;
  plain.top_k = 50;
  plain.repetition_penalty = 1.1f;
  SamplingParams biased = plain;
  for (int32_t token = 0; token < vocab; token += 3) biased.logit_bias.emplace_back(token, 2.5f);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  auto make = [&](const SamplingParams& p) {
    auto sampler = Sampler::Create(p, vocab);
    EXPECT_TRUE(sampler.ok()) << sampler.status();
    return std::make_unique<Sampler>(std::move(*sampler));
  };
  std::vector<std::unique_ptr<Sampler>> samplers;
  for (const SamplingParams* p : {&biased, &plain, &greedy}) samplers.push_back(make(*p));
  std::vector<TokenPick> picks(3);
  for (int i = 0; i < 3; ++i) {
    picks[i] = {.sampler = samplers[i].get(),
                .uniform = 0.25 + 0.2 * i,
                .prompt = prompts[i],
                .generated = {},
                .logprobs = true,
                .top_logprobs = 2};
  }

  std::vector<PickedToken> mixed, device_only;
  ASSERT_TRUE(twins[0]->ForwardSample(chunks, picks, &mixed).ok());
  std::vector<TokenPick> without_host_rows = picks;
  without_host_rows[0].sampler = nullptr;
  ASSERT_TRUE(twins[1]->ForwardSample(chunks, without_host_rows, &device_only).ok());
  std::vector<float> logits;
  ASSERT_TRUE(twins[2]->Forward(chunks, LogitsFor::kLastToken, &logits).ok());
  ASSERT_EQ(mixed.size(), 3u);

  const PickedToken expected =
      PickOnHost(picks[0], std::span<const float>(logits).subspan(0, vocab));
  EXPECT_EQ(mixed[0].token, expected.token);
  EXPECT_EQ(mixed[0].token % 3, 0) << "a +2.5 bias on every third token should win at 0.9";
  EXPECT_EQ(mixed[0].logprob, expected.logprob);
  EXPECT_EQ(mixed[0].top, expected.top);
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(mixed[i].token, device_only[i].token) << "row " << i;
    EXPECT_EQ(mixed[i].logprob, device_only[i].logprob) << "row " << i;
    EXPECT_EQ(mixed[i].top, device_only[i].top) << "row " << i;
  }
}

// A sticky CUDA error (an illegal address: a kernel handed a bad pointer, in a process of its own,
// as the context never recovers) turns the backend's Health to Unavailable naming it, so that the
// engine stops and serve exits instead of failing every later request. (Left out under memcheck,
// which reports the fault it is made of.)
TEST(CudaHybridBackendHealthTest, AFaultedContextIsReported) {
  if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto model = SmallModel(Case{"GKA-*", 64, 4, 2, 0, 0.0f, 30});
        if (!model.ok()) std::_Exit(2);
        auto gpu = CudaHybridBackend::Create((*model)->spec(), *(*model)->hybrid_weights(),
                                             {.num_slots = 2, .num_kv_blocks = 8});
        if (!gpu.ok() || !(*gpu)->Health().ok()) std::_Exit(3);
        (void)cuda::LaunchArgmaxRows(reinterpret_cast<const float*>(0x100), 1, 64, 64,
                                     reinterpret_cast<int32_t*>(0x200), nullptr);
        (void)cudaDeviceSynchronize();
        const absl::Status health = (*gpu)->Health();
        std::fprintf(stderr, "%s\n", health.ToString().c_str());
        std::_Exit(health.code() == absl::StatusCode::kUnavailable ? 0 : 4);
      },
      ::testing::ExitedWithCode(0), "CUDA device 0 failed: cudaErrorIllegalAddress");
}

INSTANTIATE_TEST_SUITE_P(Patterns, CudaHybridLongPromptTest,
                         ::testing::Values("GKA-*-GKA-*", "*-*", "GKA-GKA"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name;
                           for (const char* p = info.param; *p != 0; ++p) {
                             name += *p == '*' ? 'A' : *p == '-' ? '_' : *p;
                           }
                           return name;
                         });

// Many long prompts through the engine at once, split by the prefill budget across steps while
// others decode, sampled: every request finishes.
TEST(CudaHybridEngineTest, LongPromptsUnderLoadFinish) {
  if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here";
  auto model = SmallModel({"GKA-*-GKA-*", 64, 8, 2, 0, 0.0f, 30});
  ASSERT_TRUE(model.ok()) << model.status();
  auto gpu = CudaHybridBackend::Create((*model)->spec(), *(*model)->hybrid_weights(),
                                       {.num_slots = 16, .num_kv_blocks = 4096});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto engine =
      Engine::Create(gpu->get(), {.max_slots = 16, .prefill_token_budget = 2048}, nullptr);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<std::shared_ptr<testing::CollectingSink>> sinks;
  for (int i = 0; i < 12; ++i) {
    EngineRequest r;
    for (int t = 0; t < 1500 + 37 * i; ++t) r.prompt.push_back((t * 13 + i * 5) % 380 + 2);
    r.sampling.max_tokens = 24;
    r.sampling.temperature = 0.8f;
    r.sampling.seed = i;
    sinks.push_back(std::make_shared<testing::CollectingSink>());
    ASSERT_TRUE((*engine)->Submit(r, sinks.back()).ok());
  }
  for (auto& sink : sinks) {
    const RequestEvent last = sink->Wait();
    EXPECT_TRUE(last.status.ok()) << last.status;
    EXPECT_EQ(sink->tokens().size(), 24u);
  }
}

}  // namespace
}  // namespace ridge
