// The CUDA backend against flash-linear-attention's logits (tests/data/mesanet) and against the
// CPU backend on random models (head_dim 64 and 128, output gate on and off, odd batch sizes,
// tolerances 0 / 1e-3 / 1e-6, iteration budgets 1 and 30): logits, states and solver counts.
// Skips without a GPU. On the GPU machine:
//   RIDGE_TEST_DATA_DIR=$PWD/tests/data build/tests/gpu/cuda_backend_test
#include "models/cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/scoring.h"
#include "kernels/cuda/mesa_chunked_prefill.h"
#include "kernels/device_info.h"
#include "models/checkpoint.h"
#include "models/cpu_backend.h"
#include "models/cuda/device_memory.h"
#include "models/slot_packing.h"
#include "sampling/sampler.h"
#include "tests/gpu/small_mesa_models.h"
#include "tests/support/bf16_weights.h"
#include "tests/support/logit_agreement.h"

namespace ridge {
namespace {

using testing::Agreement;
using testing::Compare;
using testing::Ids;
using testing::ReadFloats;
using testing::SmallConfig;

std::filesystem::path DataDir() {
  const char* env = std::getenv("RIDGE_TEST_DATA_DIR");
  return std::filesystem::path(env != nullptr ? env : RIDGE_TEST_DATA_DIR) / "mesanet";
}

#define SKIP_WITHOUT_GPU() \
  if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here"

// The GPU keeps matrices in bf16; rounding the CPU's copy the same way leaves only the
// activation rounding and summation order as differences.
using testing::RoundMatricesToBf16;

// ---------------------------------------------------------------------------------------------
// Against FLA's recorded logits.

struct GoldenCase {
  std::string name;
  double max_relative_rms;
  double min_top1;
};

class CudaGoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(CudaGoldenTest, PrefillAndDecodeMatchFla) {
  SKIP_WITHOUT_GPU();
  const GoldenCase& c = GetParam();
  const auto dir = DataDir() / c.name;
  auto checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  auto config = ParseMesaNetConfig((*checkpoint)->config());
  ASSERT_TRUE(config.ok()) << config.status();
  auto weights = LoadMesaNetWeights(**checkpoint, *config);
  ASSERT_TRUE(weights.ok()) << weights.status();
  auto backend = CudaBackend::Create(*config, *weights, {.num_slots = 2});
  ASSERT_TRUE(backend.ok()) << backend.status();
  auto golden = ReadJsonFile(dir / "golden.json");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const std::vector<int32_t> ids = (*golden)["ids"].get<std::vector<int32_t>>();
  const int64_t decode_from = (*golden)["decode_from"].get<int64_t>();
  const int64_t vocab = config->vocab_size;
  const SolverOptions fla_budget{0.0f, 30};
  CudaBackend& gpu = **backend;

  // One prefill over every id.
  std::vector<float> prefill;
  const SlotChunk all{0, ids, fla_budget, nullptr, SolvePhase::kPrefill};
  ASSERT_TRUE(gpu.Forward({&all, 1}, LogitsFor::kAllTokens, &prefill).ok());
  const Agreement p = Compare(prefill, ReadFloats(dir / "logits_prefill.f32"), vocab);

  // Prefill of ids[:decode_from], then one token per step (CG from the Jacobi guess).
  std::vector<float> decode, step;
  const SlotChunk head{1, std::span<const int32_t>(ids).first(decode_from), fla_budget, nullptr,
                       SolvePhase::kPrefill};
  ASSERT_TRUE(gpu.Forward({&head, 1}, LogitsFor::kAllTokens, &decode).ok());
  for (int64_t t = decode_from; t < static_cast<int64_t>(ids.size()); ++t) {
    const SlotChunk one{1, {&ids[t], 1}, fla_budget, nullptr, SolvePhase::kDecode};
    ASSERT_TRUE(gpu.Forward({&one, 1}, LogitsFor::kLastToken, &step).ok());
    decode.insert(decode.end(), step.begin(), step.end());
  }
  const Agreement d = Compare(decode, ReadFloats(dir / "logits_decode.f32"), vocab);
  std::printf("%s: prefill relative RMS %.3e top-1 %.2f%%; decode %.3e top-1 %.2f%%\n",
              c.name.c_str(), p.relative_rms, 100 * p.top1, d.relative_rms, 100 * d.top1);
  EXPECT_LT(p.relative_rms, c.max_relative_rms);
  EXPECT_GE(p.top1, c.min_top1);
  EXPECT_LT(d.relative_rms, c.max_relative_rms);
  EXPECT_GE(d.top1, c.min_top1);
}

// The GPU backend rounds weights and matrix-product inputs to bf16, as FLA's bf16 model does;
// that model is 1.1% (RMS) from FLA's fp32 one on d64_untied and 3.2% (top-1 91.9%) on
// d64_tied_gate. Measured on an H200: 7.3e-3 / 2.26e-2 (top-1 94.9%) / 8.0e-3; the bounds sit
// about 1.5x above.
INSTANTIATE_TEST_SUITE_P(Fla060, CudaGoldenTest,
                         ::testing::Values(GoldenCase{"d64_untied", 1.1e-2, 0.96},
                                           GoldenCase{"d64_tied_gate", 3.4e-2, 0.92},
                                           GoldenCase{"d128_bf16", 1.2e-2, 0.96}),
                         [](const auto& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------
// Against the CPU backend on random models.

struct RandomCase {
  int64_t head_dim;
  bool output_gate;
  int64_t batch;
  float tolerance;
  int32_t max_iterations;
};

std::string CaseName(const RandomCase& c) {
  char tol[16];
  std::snprintf(tol, sizeof(tol), "%g", c.tolerance);
  std::string t(tol);
  std::replace(t.begin(), t.end(), '-', 'm');
  std::replace(t.begin(), t.end(), '.', 'p');
  char name[96];  // snprintf: GCC 12 warns falsely (-Wrestrict) on long string + chains
  std::snprintf(name, sizeof(name), "d%d%s_b%d_tol%s_it%d", static_cast<int>(c.head_dim),
                c.output_gate ? "_gate" : "", static_cast<int>(c.batch), t.c_str(),
                static_cast<int>(c.max_iterations));
  return name;
}

class CudaVsCpuTest : public ::testing::TestWithParam<RandomCase> {};

TEST_P(CudaVsCpuTest, PrefillThenDecodeAgree) {
  SKIP_WITHOUT_GPU();
  const RandomCase& rc = GetParam();
  const MesaNetConfig config = SmallConfig(rc.head_dim, rc.output_gate);
  MesaNetWeights weights = RandomMesaNetWeights(config, 77 + rc.head_dim);
  RoundMatricesToBf16(weights);
  const MesaNetModel cpu_model(config, weights);
  CpuBackend cpu(&cpu_model, rc.batch);
  auto gpu_or = CudaBackend::Create(config, weights, {.num_slots = rc.batch});
  ASSERT_TRUE(gpu_or.ok()) << gpu_or.status();
  CudaBackend& gpu = **gpu_or;
  const SolverOptions solver{rc.tolerance, rc.max_iterations};

  // Prompts of different lengths (one crosses 64), prefilled in one step.
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t i = 0; i < rc.batch; ++i) {
    prompts.push_back(Ids(5 + 23 * (i % 8), i, config.vocab_size));
  }
  std::vector<SolverStats> cpu_stats(rc.batch), gpu_stats(rc.batch);
  std::vector<SlotChunk> cpu_chunks, gpu_chunks;
  for (int64_t i = 0; i < rc.batch; ++i) {
    cpu_chunks.push_back({i, prompts[i], solver, &cpu_stats[i], SolvePhase::kPrefill});
    gpu_chunks.push_back({i, prompts[i], solver, &gpu_stats[i], SolvePhase::kPrefill});
  }
  std::vector<float> cpu_logits, gpu_logits;
  ASSERT_TRUE(cpu.Forward(cpu_chunks, LogitsFor::kAllTokens, &cpu_logits).ok());
  ASSERT_TRUE(gpu.Forward(gpu_chunks, LogitsFor::kAllTokens, &gpu_logits).ok());
  const Agreement prefill = Compare(gpu_logits, cpu_logits, config.vocab_size);

  // Decode steps, all sequences at once, feeding the CPU's greedy token to both.
  std::vector<int32_t> tokens(rc.batch);
  std::vector<float> cpu_decode, gpu_decode;
  for (int step = 0; step < 6; ++step) {
    for (int64_t i = 0; i < rc.batch; ++i) {
      tokens[i] = static_cast<int32_t>((step * 31 + i * 7) % config.vocab_size);
      cpu_chunks[i] = {i, {&tokens[i], 1}, solver, &cpu_stats[i], SolvePhase::kDecode};
      gpu_chunks[i] = {i, {&tokens[i], 1}, solver, &gpu_stats[i], SolvePhase::kDecode};
    }
    ASSERT_TRUE(cpu.Forward(cpu_chunks, LogitsFor::kLastToken, &cpu_logits).ok());
    ASSERT_TRUE(gpu.Forward(gpu_chunks, LogitsFor::kLastToken, &gpu_logits).ok());
    cpu_decode.insert(cpu_decode.end(), cpu_logits.begin(), cpu_logits.end());
    gpu_decode.insert(gpu_decode.end(), gpu_logits.begin(), gpu_logits.end());
  }
  const Agreement decode = Compare(gpu_decode, cpu_decode, config.vocab_size);

  // The states themselves: Hs and Gs of every layer and head, and the conv tails.
  double state_diff = 0, state_norm = 0;
  for (int64_t i = 0; i < rc.batch; ++i) {
    MesaState gpu_state(config);
    ASSERT_TRUE(gpu.ReadSlot(i, &gpu_state).ok());
    MesaState cpu_state(config);
    // The CPU backend's slots are private: replay its chunks on a fresh model state instead.
    std::vector<SequenceChunk> replay{
        {&cpu_state, prompts[i], solver, nullptr, SolvePhase::kPrefill}};
    std::vector<float> unused;
    ASSERT_TRUE(cpu_model.Forward(replay, LogitsFor::kLastToken, &unused).ok());
    for (int step = 0; step < 6; ++step) {
      const int32_t token = static_cast<int32_t>((step * 31 + i * 7) % config.vocab_size);
      replay[0] = {&cpu_state, {&token, 1}, solver, nullptr, SolvePhase::kDecode};
      ASSERT_TRUE(cpu_model.Forward(replay, LogitsFor::kLastToken, &unused).ok());
    }
    EXPECT_EQ(gpu_state.tokens(), cpu_state.tokens());
    for (size_t j = 0; j < cpu_state.data().size(); ++j) {
      const double d = double(gpu_state.data()[j]) - cpu_state.data()[j];
      state_diff += d * d;
      state_norm += double(cpu_state.data()[j]) * cpu_state.data()[j];
    }
  }
  const double state_rel = std::sqrt(state_diff / state_norm);

  SolverStats cpu_all, gpu_all;
  for (int64_t i = 0; i < rc.batch; ++i) {
    cpu_all.Merge(cpu_stats[i]);
    gpu_all.Merge(gpu_stats[i]);
  }
  std::printf(
      "%s: prefill %.3e (top-1 %.1f%%), decode %.3e (top-1 %.1f%%), state %.3e, "
      "iterations cpu %.2f gpu %.2f\n",
      CaseName(rc).c_str(), prefill.relative_rms, 100 * prefill.top1, decode.relative_rms,
      100 * decode.top1, state_rel, cpu_all.MeanIterations(), gpu_all.MeanIterations());
  // Measured on an H200: logits 4.0e-3 to 6.1e-3, states 2.6e-3 to 3.0e-3 (bf16 activations
  // into the matrix products are the difference).
  EXPECT_LT(prefill.relative_rms, 1e-2);
  EXPECT_LT(decode.relative_rms, 1e-2);
  EXPECT_GE(decode.top1, 0.9);
  EXPECT_LT(state_rel, 5e-3);
  EXPECT_EQ(gpu_all.solves, cpu_all.solves);
  EXPECT_LE(gpu_all.max_iterations, rc.max_iterations);
  // Same stopping rule: the mean iteration count agrees up to a few borderline solves.
  EXPECT_NEAR(gpu_all.MeanIterations(), cpu_all.MeanIterations(),
              0.1 * cpu_all.MeanIterations() + 0.5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaVsCpuTest,
    ::testing::Values(RandomCase{64, false, 3, 0.0f, 30}, RandomCase{64, true, 5, 1e-3f, 30},
                      RandomCase{64, false, 1, 1e-6f, 30}, RandomCase{64, true, 3, 0.0f, 1},
                      RandomCase{128, false, 3, 0.0f, 30}, RandomCase{128, true, 5, 1e-3f, 30},
                      RandomCase{128, false, 7, 1e-6f, 30}, RandomCase{128, false, 2, 0.0f, 1},
                      // 70 x 4 heads > 2 blocks per SM on an H200: the 3-per-SM decode shape
                      RandomCase{128, true, 70, 1e-3f, 30}),
    [](const auto& info) { return CaseName(info.param); });

}  // namespace
}  // namespace ridge
