// The CUDA backend's mechanics on a small random MesaNet: graph replay against eager steps and
// after the logits buffers grow, chunked prefill continuing one state and many, slot copy,
// write, read and reset, device sampling against the host's, scoring like the CPU, failed
// buffer growth keeping the old buffers, slots clamped to GPU memory, the prefill budget, and
// bad steps refused. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <span>
#include <vector>

#include "engine/scoring.h"
#include "kernels/cuda/mesa_chunked_prefill.h"
#include "kernels/device_info.h"
#include "models/cpu_backend.h"
#include "models/cuda/cuda_backend.h"
#include "models/cuda/device_memory.h"
#include "models/mesanet_model.h"
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
using testing::RoundMatricesToBf16;
using testing::SmallConfig;

// ---------------------------------------------------------------------------------------------
// Backend mechanics.

class CudaMechanicsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here";
    config_ = SmallConfig(128, false);
    weights_ = RandomMesaNetWeights(config_, 5);
  }
  MesaNetConfig config_;
  MesaNetWeights weights_;
};

// Replaying captured graphs (padded to a bucket) gives the eager path's logits.
TEST_F(CudaMechanicsTest, GraphReplayMatchesEagerSteps) {
  auto eager = CudaBackend::Create(config_, weights_, {.num_slots = 5, .use_graphs = false});
  auto graphs = CudaBackend::Create(config_, weights_, {.num_slots = 5, .use_graphs = true});
  ASSERT_TRUE(eager.ok() && graphs.ok());
  const std::vector<int32_t> prompt = Ids(40, 1, config_.vocab_size);
  for (CudaBackend* b : {eager->get(), graphs->get()}) {
    std::vector<SlotChunk> chunks;
    for (int64_t i = 0; i < 5; ++i)
      chunks.push_back({i, prompt, {}, nullptr, SolvePhase::kPrefill});
    std::vector<int32_t> unused;
    ASSERT_TRUE(b->ForwardGreedy(chunks, &unused).ok());
  }
  std::vector<int32_t> tokens = {3, 1, 4, 1, 5};
  for (int step = 0; step < 4; ++step) {  // the bucket is captured on its second use
    std::vector<float> a, b;
    std::vector<int32_t> ga, gb;
    std::vector<SlotChunk> chunks;
    for (int64_t i = 0; i < 5; ++i) {
      chunks.push_back({i, {&tokens[i], 1}, {1e-4f, 30}, nullptr, SolvePhase::kDecode});
    }
    if (step % 2 == 0) {
      ASSERT_TRUE((*eager)->Forward(chunks, LogitsFor::kLastToken, &a).ok());
      ASSERT_TRUE((*graphs)->Forward(chunks, LogitsFor::kLastToken, &b).ok());
      EXPECT_LT(Compare(b, a, config_.vocab_size).relative_rms, 1e-4) << "step " << step;
    } else {
      ASSERT_TRUE((*eager)->ForwardGreedy(chunks, &ga).ok());
      ASSERT_TRUE((*graphs)->ForwardGreedy(chunks, &gb).ok());
      EXPECT_EQ(ga, gb) << "step " << step;
    }
    for (int64_t i = 0; i < 5; ++i) tokens[i] = (tokens[i] * 17 + step) % config_.vocab_size;
  }
}

// A graph that copies logits to the host must follow the host buffer when it grows: one kept
// across the regrowth copied into the freed buffer, and the caller read stale logits (unless the
// pinned allocator happened to hand the same address back). Tokens change every step, so stale
// logits differ clearly from the eager backend's.
TEST_F(CudaMechanicsTest, GraphsFollowTheLogitsBuffersWhenTheyGrow) {
  auto eager = CudaBackend::Create(config_, weights_, {.num_slots = 64, .use_graphs = false});
  auto graphs = CudaBackend::Create(config_, weights_, {.num_slots = 64, .use_graphs = true});
  ASSERT_TRUE(eager.ok() && graphs.ok());
  std::vector<int32_t> tokens(64);
  for (int64_t i = 0; i < 64; ++i)
    tokens[i] = static_cast<int32_t>((i * 37 + 5) % config_.vocab_size);
  auto decode = [&](int64_t batch) {
    for (int32_t& t : tokens) t = static_cast<int32_t>((t * 17 + 3) % config_.vocab_size);
    std::vector<SlotChunk> chunks;
    for (int64_t i = 0; i < batch; ++i) {
      chunks.push_back({i, {&tokens[i], 1}, {1e-4f, 30}, nullptr, SolvePhase::kDecode});
    }
    return chunks;
  };
  std::vector<float> last_eager, last_graphs, eager_last_step;
  const std::vector<int32_t> first_tokens = tokens;
  for (CudaBackend* b : {eager->get(), graphs->get()}) {
    tokens = first_tokens;
    std::vector<int32_t> greedy;
    ASSERT_TRUE(b->ForwardGreedy(decode(64), &greedy).ok());  // device logits for 64 rows
    std::vector<float> logits;
    // Batch 2 twice (its graph is captured on the second use, copying to a 2-row host buffer),
    // batch 4 (the host buffer grows: a graph kept would now be replayed by the next batch 2),
    // then batch 2 three times (captured again on its second use, replayed on the third).
    const std::vector<int64_t> batches = {2, 2, 4, 2, 2, 2};
    std::vector<std::vector<float>> steps;
    for (const int64_t batch : batches) {
      ASSERT_TRUE(b->Forward(decode(batch), LogitsFor::kLastToken, &logits).ok());
      steps.push_back(logits);
    }
    (b == eager->get() ? last_eager : last_graphs) = steps[3];
    if (b == graphs->get()) {
      EXPECT_LT(Compare(steps[5], eager_last_step, config_.vocab_size).relative_rms, 1e-4)
          << "the replay after the recapture";
    } else {
      eager_last_step = steps[5];
    }
  }
  ASSERT_EQ(last_graphs.size(), last_eager.size());
  EXPECT_LT(Compare(last_graphs, last_eager, config_.vocab_size).relative_rms, 1e-4)
      << "the first batch-2 step after the host buffer grew";
}

// A prompt fed in two long pieces runs chunked twice, the second continuing from a non-zero
// state and conv tails mid-chunk; logits of every token and the final state match the CPU.
TEST_F(CudaMechanicsTest, ChunkedPrefillContinuesAState) {
  for (const int64_t head_dim : {64, 128}) {
    const MesaNetConfig config = SmallConfig(head_dim, true);
    MesaNetWeights weights = RandomMesaNetWeights(config, 21);
    RoundMatricesToBf16(weights);
    const MesaNetModel cpu(config, weights);
    auto gpu = CudaBackend::Create(config, weights, {.num_slots = 1});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const std::vector<int32_t> ids = Ids(70 + 90, 9, config.vocab_size);
    MesaState cpu_state(config);
    std::vector<float> cpu_logits, gpu_logits, part;
    SolverStats cpu_stats, gpu_stats;
    for (const auto& [from, n] : {std::pair<int64_t, int64_t>{0, 70}, {70, 90}}) {
      const auto piece = std::span<const int32_t>(ids).subspan(from, n);
      const SequenceChunk c{&cpu_state, piece, {1e-6f, 30}, &cpu_stats, SolvePhase::kPrefill};
      ASSERT_TRUE(cpu.Forward({&c, 1}, LogitsFor::kAllTokens, &part).ok());
      cpu_logits.insert(cpu_logits.end(), part.begin(), part.end());
      const SlotChunk g{0, piece, {1e-6f, 30}, &gpu_stats, SolvePhase::kPrefill};
      ASSERT_TRUE((*gpu)->Forward({&g, 1}, LogitsFor::kAllTokens, &part).ok());
      gpu_logits.insert(gpu_logits.end(), part.begin(), part.end());
    }
    MesaState gpu_state(config);
    ASSERT_TRUE((*gpu)->ReadSlot(0, &gpu_state).ok());
    const Agreement logits = Compare(gpu_logits, cpu_logits, config.vocab_size);
    const Agreement state = Compare(gpu_state.data(), cpu_state.data(), 1);
    std::printf(
        "d%lld split prompt: logits %.3e (top-1 %.1f%%), state %.3e, iterations cpu %.2f "
        "gpu %.2f\n",
        static_cast<long long>(head_dim), logits.relative_rms, 100 * logits.top1,
        state.relative_rms, cpu_stats.MeanIterations(), gpu_stats.MeanIterations());
    EXPECT_LT(logits.relative_rms, 1e-2);
    EXPECT_LT(state.relative_rms, 5e-3);
    EXPECT_EQ(gpu_stats.solves, cpu_stats.solves);
    EXPECT_NEAR(gpu_stats.MeanIterations(), cpu_stats.MeanIterations(),
                0.1 * cpu_stats.MeanIterations() + 0.5);
  }
}

// Many sequences continue from non-zero states in one step, with pieces of different lengths:
// the chunk-state launch spans many waves of blocks, and every sequence's final state and
// last-token logits still match the CPU's. (A chunk-state block once started from the slot's
// packed Hs, whose entries left of its diagonal blocks are the mirror of rows that another block
// of the same head writes when it finishes: a block of a later wave could read them updated.)
TEST_F(CudaMechanicsTest, ChunkedPrefillContinuesManyStatesInOneStep) {
  const MesaNetConfig config = SmallConfig(128, false);
  MesaNetWeights weights = RandomMesaNetWeights(config, 23);
  RoundMatricesToBf16(weights);
  const MesaNetModel cpu(config, weights);
  constexpr int64_t kSequences = 160, kFirstPiece = 40;
  auto gpu = CudaBackend::Create(config, weights, {.num_slots = kSequences});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::vector<MesaState> cpu_states(kSequences, MesaState(config));
  std::vector<std::vector<int32_t>> ids(kSequences);
  for (int64_t i = 0; i < kSequences; ++i) {
    ids[i] = Ids(kFirstPiece + 32 + (i * 37) % 96, 100 + i, config.vocab_size);
  }
  std::vector<float> gpu_logits, cpu_logits, part;
  for (int piece = 0; piece < 2; ++piece) {
    std::vector<SlotChunk> chunks;
    cpu_logits.clear();
    for (int64_t i = 0; i < kSequences; ++i) {
      const auto span = piece == 0 ? std::span<const int32_t>(ids[i]).first(kFirstPiece)
                                   : std::span<const int32_t>(ids[i]).subspan(kFirstPiece);
      chunks.push_back({i, span, {1e-6f, 30}, nullptr, SolvePhase::kPrefill});
      const SequenceChunk c{&cpu_states[i], span, {1e-6f, 30}, nullptr, SolvePhase::kPrefill};
      ASSERT_TRUE(cpu.Forward({&c, 1}, LogitsFor::kLastToken, &part).ok());
      cpu_logits.insert(cpu_logits.end(), part.begin(), part.end());
    }
    ASSERT_TRUE((*gpu)->Forward(chunks, LogitsFor::kLastToken, &gpu_logits).ok());
  }
  double worst_state = 0.0;
  for (int64_t i = 0; i < kSequences; ++i) {
    MesaState gpu_state(config);
    ASSERT_TRUE((*gpu)->ReadSlot(i, &gpu_state).ok());
    worst_state =
        std::max(worst_state, Compare(gpu_state.data(), cpu_states[i].data(), 1).relative_rms);
  }
  const Agreement logits = Compare(gpu_logits, cpu_logits, config.vocab_size);
  std::printf("%lld sequences continued: logits %.3e (top-1 %.1f%%), worst state %.3e\n",
              static_cast<long long>(kSequences), logits.relative_rms, 100 * logits.top1,
              worst_state);
  EXPECT_LT(logits.relative_rms, 1e-2);
  EXPECT_LT(worst_state, 5e-3);
}

TEST_F(CudaMechanicsTest, SlotsCopyWriteReadAndReset) {
  auto gpu = CudaBackend::Create(config_, weights_, {.num_slots = 3});
  ASSERT_TRUE(gpu.ok());
  const std::vector<int32_t> prompt = Ids(30, 2, config_.vocab_size);
  const SlotChunk chunk{0, prompt, {}, nullptr, SolvePhase::kPrefill};
  std::vector<float> logits;
  ASSERT_TRUE((*gpu)->Forward({&chunk, 1}, LogitsFor::kLastToken, &logits).ok());
  ASSERT_TRUE((*gpu)->CopySlot(0, 1).ok());
  MesaState s0(config_), s1(config_);
  ASSERT_TRUE((*gpu)->ReadSlot(0, &s0).ok());
  ASSERT_TRUE((*gpu)->ReadSlot(1, &s1).ok());
  EXPECT_EQ(s0.tokens(), 30);
  EXPECT_TRUE(std::equal(s0.data().begin(), s0.data().end(), s1.data().begin()));
  // The pool keeps each Hs packed to its upper 4x4 blocks, so a slot is smaller than MesaState
  // and Hs comes back symmetric outside the diagonal blocks (inside them both halves are kept).
  const SlotShape shape = SlotShape::Of(config_);
  EXPECT_EQ((*gpu)->state_bytes_per_slot(),
            shape.layers * shape.packed_layer_floats() * static_cast<int64_t>(sizeof(float)));
  EXPECT_LT((*gpu)->state_bytes_per_slot(), s0.data().size() * sizeof(float));
  const int64_t d = config_.head_dim;
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      if (i / 4 != j / 4) {
        ASSERT_EQ(s0.hs(0)[i * d + j], s0.hs(0)[j * d + i]) << i << "," << j;
      }
    }
  }
  // A state written from the host continues exactly like the one it was read from.
  ASSERT_TRUE((*gpu)->WriteSlot(2, s0).ok());
  const int32_t token = 7;
  std::vector<float> from0, from2;
  const SlotChunk d0{0, {&token, 1}, {}, nullptr, SolvePhase::kDecode};
  const SlotChunk d2{2, {&token, 1}, {}, nullptr, SolvePhase::kDecode};
  ASSERT_TRUE((*gpu)->Forward({&d0, 1}, LogitsFor::kLastToken, &from0).ok());
  ASSERT_TRUE((*gpu)->Forward({&d2, 1}, LogitsFor::kLastToken, &from2).ok());
  EXPECT_EQ(from0, from2);
  ASSERT_TRUE((*gpu)->ResetSlot(1).ok());
  ASSERT_TRUE((*gpu)->ReadSlot(1, &s1).ok());
  EXPECT_EQ(s1.tokens(), 0);
  EXPECT_TRUE(std::all_of(s1.data().begin(), s1.data().end(), [](float x) { return x == 0.0f; }));
}

// Sampling on the GPU picks what the host sampler picks from the same step's logits (taken
// from a copy of each slot), with the same uniforms: temperature, top-k/p, min-p and the three
// penalties over a growing history, greedy with a penalty, and the logprobs.
TEST_F(CudaMechanicsTest, SamplesOnTheDeviceAsTheHostWould) {
  constexpr int64_t kSeqs = 3;
  auto gpu = CudaBackend::Create(config_, weights_, {.num_slots = 2 * kSeqs});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int32_t vocab = static_cast<int32_t>(config_.vocab_size);
  std::vector<SamplingParams> params(kSeqs);
  params[0].temperature = 0.8f;
  params[0].top_k = 20;
  params[1].temperature = 1.2f;
  params[1].top_p = 0.9f;
  params[1].min_p = 0.02f;
  params[1].repetition_penalty = 1.3f;
  params[1].frequency_penalty = 0.5f;
  params[1].presence_penalty = 0.3f;
  params[2].temperature = 0.0f;
  params[2].repetition_penalty = 1.2f;
  std::vector<Sampler> samplers;
  for (const SamplingParams& p : params) {
    auto sampler = Sampler::Create(p, vocab);
    ASSERT_TRUE(sampler.ok());
    samplers.push_back(std::move(*sampler));
  }
  std::vector<std::vector<int32_t>> prompts, generated(kSeqs);
  std::vector<SlotChunk> prefill;
  for (int64_t i = 0; i < kSeqs; ++i) prompts.push_back(Ids(40 + 5 * i, 30 + i, vocab));
  for (int64_t i = 0; i < kSeqs; ++i) {
    prefill.push_back({i, prompts[i], {}, nullptr, SolvePhase::kPrefill});
  }
  std::vector<int32_t> next;
  ASSERT_TRUE((*gpu)->ForwardGreedy(prefill, &next).ok());
  std::mt19937_64 rng(7);
  int compared = 0;
  for (int step = 0; step < 8; ++step) {
    std::vector<SlotChunk> chunks, copies;
    std::vector<TokenPick> picks;
    for (int64_t i = 0; i < kSeqs; ++i) {
      ASSERT_TRUE((*gpu)->CopySlot(i, kSeqs + i).ok());
      chunks.push_back({i, {&next[i], 1}, {1e-4f, 30}, nullptr, SolvePhase::kDecode});
      copies.push_back({kSeqs + i, {&next[i], 1}, {1e-4f, 30}, nullptr, SolvePhase::kDecode});
      const double uniform = static_cast<double>(rng() >> 11) * 0x1p-53;
      picks.push_back({&samplers[i], uniform, prompts[i], generated[i], step % 2 == 0, 5});
    }
    std::vector<float> logits;
    ASSERT_TRUE((*gpu)->Forward(copies, LogitsFor::kLastToken, &logits).ok());
    std::vector<PickedToken> picked;
    ASSERT_TRUE((*gpu)->ForwardSample(chunks, picks, &picked).ok());
    ASSERT_EQ(picked.size(), static_cast<size_t>(kSeqs));
    for (int64_t i = 0; i < kSeqs; ++i) {
      const std::span<const float> row = std::span<const float>(logits).subspan(i * vocab, vocab);
      const int32_t expected =
          samplers[i].SampleWithUniform(row, prompts[i], generated[i], picks[i].uniform);
      EXPECT_EQ(picked[i].token, expected) << "step " << step << " sequence " << i;
      if (picks[i].logprobs) {
        EXPECT_NEAR(picked[i].logprob, TokenLogprob(row, picked[i].token), 1e-4);
        std::vector<std::pair<int32_t, float>> top;
        TopLogprobs(row, 5, &top);
        ASSERT_EQ(picked[i].top.size(), top.size());
        for (size_t n = 0; n < top.size(); ++n) {
          EXPECT_EQ(picked[i].top[n].first, top[n].first);
          EXPECT_NEAR(picked[i].top[n].second, top[n].second, 1e-4);
        }
      } else {
        EXPECT_TRUE(picked[i].top.empty());
      }
      next[i] = picked[i].token;
      generated[i].push_back(picked[i].token);
      ++compared;
    }
  }
  EXPECT_EQ(compared, 8 * kSeqs);

  // A pick with a bad history token or too many logprobs is refused before anything runs.
  const std::vector<int32_t> bad_history = {vocab};
  const SlotChunk one{0, {&next[0], 1}, {}, nullptr, SolvePhase::kDecode};
  std::vector<PickedToken> picked;
  const TokenPick bad_pick{&samplers[1], 0.5, prompts[1], bad_history, false, 0};
  EXPECT_EQ((*gpu)->ForwardSample({&one, 1}, {&bad_pick, 1}, &picked).code(),
            absl::StatusCode::kInvalidArgument);
  const TokenPick too_many{&samplers[0], 0.5, prompts[0], {}, true, 21};
  EXPECT_EQ((*gpu)->ForwardSample({&one, 1}, {&too_many, 1}, &picked).code(),
            absl::StatusCode::kInvalidArgument);
}

// Scoring (the score command) on the GPU: the prefill part through the chunked kernels with
// every position's logits, the rest token by token; both agree with the CPU.
TEST_F(CudaMechanicsTest, ScoresLikeTheCpu) {
  MesaNetWeights weights = weights_;
  RoundMatricesToBf16(weights);
  const MesaNetModel cpu(config_, weights);
  auto gpu = CudaBackend::Create(config_, weights, {.num_slots = 1});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const std::vector<int32_t> ids = Ids(60, 4, config_.vocab_size);
  const SolverOptions solver{1e-6f, 30};
  auto on_cpu = ScoreSequence(cpu, ids, 40, solver);
  auto on_gpu = ScoreSequence(**gpu, ids, 40, solver);
  ASSERT_TRUE(on_cpu.ok() && on_gpu.ok());
  ASSERT_EQ(on_gpu->logits.size(), on_cpu->logits.size());
  EXPECT_LT(Compare(on_gpu->logits, on_cpu->logits, config_.vocab_size).relative_rms, 1e-2);
  EXPECT_NEAR(on_gpu->perplexity, on_cpu->perplexity, 0.01 * on_cpu->perplexity);
  EXPECT_EQ(on_gpu->solver_stats.solves, on_cpu->solver_stats.solves);
}

// Growing buffers is all or nothing: when one allocation of a set fails (out of memory), the
// buffers already held are untouched, the error names the cause, and the CUDA runtime has no
// error left over for the next launch to trip on.
TEST_F(CudaMechanicsTest, FailedBufferGrowthKeepsTheOldBuffers) {
  cuda::DeviceBuffer kept;
  ASSERT_TRUE(kept.Allocate(1024).ok());
  void* const before = kept.as<void>();
  cuda::DeviceBuffer other;
  {
    cuda::BufferRenewal renew;
    ASSERT_TRUE(renew.Device(&kept, 4096).ok());
    const absl::Status huge = renew.Device(&other, size_t{1} << 50);  // a petabyte
    EXPECT_EQ(huge.code(), absl::StatusCode::kResourceExhausted) << huge;
  }  // not committed
  EXPECT_EQ(kept.as<void>(), before);
  EXPECT_EQ(kept.bytes(), 1024u);
  EXPECT_TRUE(other.empty());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // The backend still runs afterwards.
  auto gpu = CudaBackend::Create(config_, weights_, {.num_slots = 1});
  ASSERT_TRUE(gpu.ok());
  const int32_t token = 1;
  const SlotChunk one{0, {&token, 1}, {}, nullptr, SolvePhase::kDecode};
  std::vector<int32_t> next;
  EXPECT_TRUE((*gpu)->ForwardGreedy({&one, 1}, &next).ok());
}

// Asking for more slots than the GPU holds gives as many as fit with room left for the step
// buffers, not a failure; the last slot runs.
TEST_F(CudaMechanicsTest, ClampsSlotsToGpuMemory) {
  size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  auto probe = CudaBackend::Create(config_, weights_, {.num_slots = 1});
  ASSERT_TRUE(probe.ok());
  const int64_t slot_bytes = (*probe)->state_bytes_per_slot();
  probe->reset();
  const int64_t requested = static_cast<int64_t>(free_before / slot_bytes) * 2;
  auto gpu = CudaBackend::Create(config_, weights_, {.num_slots = requested});
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int64_t slots = (*gpu)->num_slots();
  EXPECT_LT(slots, requested);
  EXPECT_GT(slots, requested / 4);  // most of the free memory, not a token amount
  size_t free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_GE(free_after, size_t{1} << 29) << "the pool left no room for step buffers";
  const int32_t token = 1;
  const SlotChunk last{slots - 1, {&token, 1}, {}, nullptr, SolvePhase::kDecode};
  std::vector<int32_t> next;
  EXPECT_TRUE((*gpu)->ForwardGreedy({&last, 1}, &next).ok());
}

// The default prefill budget is whole chunks whose solve blocks (one per chunk and head) fill
// the GPU about three times over, and never under the CPU's 512 tokens.
TEST_F(CudaMechanicsTest, PrefillBudgetIsAboutThreeWavesOfChunks) {
  auto gpu = CudaBackend::Create(config_, weights_, {.num_slots = 1});
  ASSERT_TRUE(gpu.ok());
  int sm_count = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const int64_t budget = (*gpu)->preferred_prefill_tokens_per_step();
  EXPECT_EQ(budget % cuda::kPrefillChunk, 0);
  EXPECT_GE(budget, 512);
  const int64_t blocks = budget / cuda::kPrefillChunk * config_.num_heads;
  if (budget > 512) {
    EXPECT_LE(blocks, 3 * sm_count);
    EXPECT_GT(blocks, 3 * sm_count - config_.num_heads);
  }
}

TEST_F(CudaMechanicsTest, RejectsBadSteps) {
  auto gpu = CudaBackend::Create(config_, weights_, {.num_slots = 2});
  ASSERT_TRUE(gpu.ok());
  const int32_t good = 1, bad = static_cast<int32_t>(config_.vocab_size);
  std::vector<float> logits;
  const SlotChunk out_of_vocab{0, {&bad, 1}, {}, nullptr, SolvePhase::kDecode};
  EXPECT_EQ((*gpu)->Forward({&out_of_vocab, 1}, LogitsFor::kLastToken, &logits).code(),
            absl::StatusCode::kInvalidArgument);
  const SlotChunk bad_slot{2, {&good, 1}, {}, nullptr, SolvePhase::kDecode};
  EXPECT_EQ((*gpu)->Forward({&bad_slot, 1}, LogitsFor::kLastToken, &logits).code(),
            absl::StatusCode::kInvalidArgument);
  const SlotChunk twice[2] = {{0, {&good, 1}, {}, nullptr, SolvePhase::kDecode},
                              {0, {&good, 1}, {}, nullptr, SolvePhase::kDecode}};
  EXPECT_EQ((*gpu)->Forward(twice, LogitsFor::kLastToken, &logits).code(),
            absl::StatusCode::kInvalidArgument);
  const SlotChunk bad_solver{0, {&good, 1}, {-1.0f, 30}, nullptr, SolvePhase::kDecode};
  EXPECT_EQ((*gpu)->Forward({&bad_solver, 1}, LogitsFor::kLastToken, &logits).code(),
            absl::StatusCode::kInvalidArgument);
  MesaNetConfig odd = config_;
  odd.head_dim = 96;
  odd.num_heads = 2;
  EXPECT_EQ(CudaBackend::Create(odd, RandomMesaNetWeights(odd, 1), {}).status().code(),
            absl::StatusCode::kUnimplemented);
  for (const float residual : {-0.5f, 2.0f, std::nanf("")}) {
    EXPECT_EQ(CudaBackend::Create(config_, weights_, {.prefill_single_pass_residual = residual})
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << residual;
  }
}

}  // namespace
}  // namespace ridge
