// The CUDA hybrid backend as ranks of a tensor-parallel group (CudaHybridOptions::rank): two
// ranks on one GPU, each a CudaHybridBackend of its RankSpec and SliceRankWeights, summing their
// partial outputs and gathering logits through HostStagedCollective (over ThreadCollectives),
// stepped on two threads, against the unsplit backend on the same random hybrid (GKA with
// GQA-expanded heads, full attention, a sliding window with a key/value head both ranks read, an
// MLP and a vocabulary that do not divide by two): prompts across KV blocks and the window, then
// decode steps; rank 0's logits and greedy picks answer for the group, rank 1's steps return
// nothing; each rank's solver counts are its heads'. Then TensorParallelCudaBackend, the same
// two ranks as one backend: the whole model's logits and picks, slots and blocks copied,
// exported and imported across the ranks continuing bit for bit; a group of one rank through
// NCCL's collectives (loaded at run time: $RIDGE_NCCL_LIBRARY or libnccl.so.2), its decode
// steps replayed from graphs that capture them; two ranks on one GPU refused by NCCL's rule.
// Skips without a GPU (the NCCL test also without NCCL).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "kernels/device_info.h"
#include "models/arch/hybrid_qwen3.h"
#include "models/cuda/device_collective.h"
#include "models/cuda/hybrid_backend.h"
#include "models/cuda/nccl_library.h"
#include "models/cuda/tensor_parallel_cuda_backend.h"
#include "models/tensor_parallel.h"
#include "models/tensor_parallel_weights.h"
#include "models/thread_collectives.h"

namespace ridge {
namespace {

constexpr int64_t kBlockSize = 16;
constexpr int64_t kSlots = 3, kBlocks = 12;

GkaSpec Gka(int64_t q, int64_t k, int64_t v) {
  GkaSpec g;
  g.q_heads = q;
  g.k_heads = k;
  g.v_heads = v;
  g.head_dim = 64;
  return g;
}

AttentionSpec Attention(int64_t q, int64_t kv, int64_t window = 0) {
  AttentionSpec a;
  a.q_heads = q;
  a.kv_heads = kv;
  a.head_dim = 64;
  a.window = window;
  a.rope.theta = 10000.0;
  return a;
}

ModelSpec Spec() {
  ModelSpec spec;
  spec.architecture = "hybrid_qwen3";
  spec.vocab_size = 1003;
  spec.hidden_size = 256;
  spec.max_position_embeddings = 4096;
  spec.layers = {
      {Gka(4, 2, 2), 360}, {Attention(4, 2), 360}, {Attention(4, 1, 24), 384}, {Gka(2, 2, 4), 360}};
  return spec;
}

// The largest difference between two logit sets, relative to the largest logit.
double RelativeDifference(const std::vector<float>& got, const std::vector<float>& expected) {
  double largest = 0, worst = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    largest = std::max(largest, std::abs(double(expected[i])));
    worst = std::max(worst, std::abs(double(got[i]) - expected[i]));
  }
  return worst / largest;
}

class CudaTensorParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (QueryCudaDevices().empty()) GTEST_SKIP() << "no CUDA device here";
    auto model = HybridQwen3Model::Random(spec_, 5, kBlockSize);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    const CudaHybridOptions base{.num_slots = kSlots,
                                 .num_kv_blocks = kBlocks,
                                 .kv_block_size = kBlockSize,
                                 .use_graphs = false};
    auto whole = CudaHybridBackend::Create(spec_, *model_->hybrid_weights(), base);
    ASSERT_TRUE(whole.ok()) << whole.status();
    whole_ = std::move(*whole);
    auto plan = PlanTensorParallel(spec_, 2);
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (const RankShard& shard : *plan) {
      weights_.push_back(SliceRankWeights(spec_, *model_->hybrid_weights(), shard));
      staged_.push_back(std::make_unique<HostStagedCollective>(&group_.rank(shard.rank)));
      CudaHybridOptions options = base;
      options.use_graphs = true;  // refused by the host-staged collective
      options.rank = CudaHybridOptions::Rank{staged_.back().get(), shard.vocab};
      auto rank =
          CudaHybridBackend::Create(RankSpec(spec_, shard), weights_.back().weights, options);
      ASSERT_TRUE(rank.ok()) << rank.status();
      ranks_.push_back(std::move(*rank));
    }
  }

  // Both ranks step `chunks` at once (rank 1 on a thread of its own); rank 0's logits.
  void StepRanks(std::vector<SlotChunk> chunks0, std::vector<SlotChunk> chunks1, LogitsFor which,
                 std::vector<float>* logits) {
    std::vector<float> rank1_logits = {1.0f};
    absl::Status status1;
    std::thread other([&] { status1 = ranks_[1]->Forward(chunks1, which, &rank1_logits); });
    const absl::Status status0 = ranks_[0]->Forward(chunks0, which, logits);
    other.join();
    ASSERT_TRUE(status0.ok()) << status0;
    ASSERT_TRUE(status1.ok()) << status1;
    EXPECT_TRUE(rank1_logits.empty()) << "rank 1 answers nothing";
  }

  const ModelSpec spec_ = Spec();
  std::unique_ptr<HybridQwen3Model> model_;
  std::unique_ptr<CudaHybridBackend> whole_;
  ThreadCollectives group_{2, std::chrono::seconds(60)};
  std::vector<RankWeights> weights_;
  std::vector<std::unique_ptr<HostStagedCollective>> staged_;
  std::vector<std::unique_ptr<CudaHybridBackend>> ranks_;
};

TEST_F(CudaTensorParallelTest, TwoRanksOnOneGpuStepAsTheWholeModel) {
  // A rank keeps its heads' states only; the key/value head both read (the window's ring in the
  // slot, a full layer's in the blocks) is kept by each.
  EXPECT_LT(ranks_[0]->state_bytes_per_slot(), whole_->state_bytes_per_slot());
  EXPECT_GT(ranks_[0]->state_bytes_per_slot() + ranks_[1]->state_bytes_per_slot(),
            whole_->state_bytes_per_slot());
  EXPECT_EQ(ranks_[0]->kv_layout().bytes_per_block() + ranks_[1]->kv_layout().bytes_per_block(),
            whole_->kv_layout().bytes_per_block());

  // Prompts of 21 and 40 tokens (across blocks and the window of 24) in slots 2 and 0, then
  // decode steps with the whole model's greedy tokens; caps of 30 and 10 iterations.
  std::vector<std::vector<int32_t>> tokens(2);
  for (int i = 0; i < 21; ++i) tokens[0].push_back((i * 37 + 5) % 1003);
  for (int i = 0; i < 40; ++i) tokens[1].push_back((i * 101 + 17) % 1003);
  const int64_t slots[] = {2, 0};
  const std::vector<int32_t> tables[] = {{0, 1, 2}, {6, 7, 8, 9}};
  for (int step = 0; step < 5; ++step) {
    SolverStats expected_stats[2], stats0[2], stats1[2];
    std::vector<SlotChunk> expected_chunks, chunks0, chunks1;
    for (int i = 0; i < 2; ++i) {
      SlotChunk chunk{.slot = slots[i],
                      .tokens = tokens[i],
                      .solver = {0.0f, i == 0 ? 30 : 10},
                      .kv_blocks = tables[i]};
      chunk.stats = &expected_stats[i];
      expected_chunks.push_back(chunk);
      chunk.stats = &stats0[i];
      chunks0.push_back(chunk);
      chunk.stats = &stats1[i];
      chunks1.push_back(chunk);
    }
    std::vector<float> expected, got;
    ASSERT_TRUE(whole_->Forward(expected_chunks, LogitsFor::kAllTokens, &expected).ok());
    StepRanks(chunks0, chunks1, LogitsFor::kAllTokens, &got);
    ASSERT_EQ(got.size(), expected.size());
    const double difference = RelativeDifference(got, expected);
    std::printf("step %d: largest logit difference %.2e of the largest logit\n", step, difference);
    // bf16 activations between the products: a partial sum rounded differently can move a
    // product's input by an ulp of bf16.
    EXPECT_LT(difference, 2e-2) << "step " << step;
    for (int i = 0; i < 2; ++i) {
      // Each rank solves for its half of the heads, as often as the whole model does for all.
      EXPECT_EQ(stats0[i].solves + stats1[i].solves, expected_stats[i].solves);
      EXPECT_EQ(stats0[i].total_iterations + stats1[i].total_iterations,
                expected_stats[i].total_iterations);
      EXPECT_EQ(ranks_[0]->SlotPosition(slots[i]), whole_->SlotPosition(slots[i]));
      EXPECT_EQ(ranks_[1]->SlotPosition(slots[i]), whole_->SlotPosition(slots[i]));
    }
    int64_t row = 0;
    for (int i = 0; i < 2; ++i) {
      row += static_cast<int64_t>(tokens[i].size());
      const float* last = &expected[(row - 1) * spec_.vocab_size];
      tokens[i] = {static_cast<int32_t>(std::max_element(last, last + spec_.vocab_size) - last)};
    }
  }

  // Greedy picks come from rank 0's gathered logits; rank 1 picks nothing.
  const SlotChunk chunk{
      .slot = 2, .tokens = tokens[0], .solver = {0.0f, 30}, .kv_blocks = tables[0]};
  std::vector<float> expected;
  ASSERT_TRUE(whole_->Forward({&chunk, 1}, LogitsFor::kLastToken, &expected).ok());
  std::vector<int32_t> picked0, picked1 = {-1};
  absl::Status status1;
  std::thread other([&] { status1 = ranks_[1]->ForwardGreedy({&chunk, 1}, &picked1); });
  ASSERT_TRUE(ranks_[0]->ForwardGreedy({&chunk, 1}, &picked0).ok());
  other.join();
  ASSERT_TRUE(status1.ok()) << status1;
  EXPECT_TRUE(picked1.empty());
  ASSERT_EQ(picked0.size(), 1u);
  std::vector<float> sorted = expected;
  std::sort(sorted.rbegin(), sorted.rend());
  if (sorted[0] - sorted[1] > 1e-2 * std::abs(sorted[0])) {  // not a near tie
    EXPECT_EQ(picked0[0], std::max_element(expected.begin(), expected.end()) - expected.begin());
  }
}

TEST_F(CudaTensorParallelTest, RefusesARankWithoutItsVocabularySlice) {
  CudaHybridOptions options{.num_slots = 1, .num_kv_blocks = 2, .kv_block_size = kBlockSize};
  auto plan = PlanTensorParallel(spec_, 2);
  ASSERT_TRUE(plan.ok());
  options.rank = CudaHybridOptions::Rank{staged_[0].get(), {0, spec_.vocab_size + 1}};
  auto bad = CudaHybridBackend::Create(RankSpec(spec_, (*plan)[0]), weights_[0].weights, options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("slice of the vocabulary"), std::string::npos)
      << bad.status();
  // The whole model's weights for a rank's slice: the rows do not match.
  options.rank = CudaHybridOptions::Rank{staged_[0].get(), (*plan)[0].vocab};
  bad = CudaHybridBackend::Create(spec_, *model_->hybrid_weights(), options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("rows"), std::string::npos) << bad.status();
}

TEST_F(CudaTensorParallelTest, TheGroupServesAsOneBackend) {
  auto split = TensorParallelCudaBackend::Create(
      spec_, *model_->hybrid_weights(),
      {.ranks = 2,
       .devices = {0},
       .backend = {.num_slots = kSlots, .num_kv_blocks = kBlocks, .kv_block_size = kBlockSize}});
  ASSERT_TRUE(split.ok()) << split.status();
  TensorParallelCudaBackend& tp = **split;
  EXPECT_EQ(tp.ranks(), 2);
  EXPECT_EQ(tp.num_slots(), kSlots);
  EXPECT_EQ(tp.num_kv_blocks(), kBlocks);
  EXPECT_EQ(tp.state_format(), whole_->state_format() + "/tp2");
  EXPECT_EQ(tp.state_bytes_per_slot(),
            ranks_[0]->state_bytes_per_slot() + ranks_[1]->state_bytes_per_slot());
  EXPECT_EQ(tp.kv_layout().bytes_per_block(), whole_->kv_layout().bytes_per_block());

  std::vector<int32_t> prompt;
  for (int i = 0; i < 30; ++i) prompt.push_back((i * 53 + 11) % 1003);
  const std::vector<int32_t> table = {0, 1};
  SolverStats whole_stats, split_stats;
  SlotChunk chunk{.slot = 0, .tokens = prompt, .solver = {1e-3f, 30}, .kv_blocks = table};
  chunk.stats = &whole_stats;
  std::vector<float> expected, got;
  ASSERT_TRUE(whole_->Forward({&chunk, 1}, LogitsFor::kLastToken, &expected).ok());
  chunk.stats = &split_stats;
  ASSERT_TRUE(tp.Forward({&chunk, 1}, LogitsFor::kLastToken, &got).ok());
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_LT(RelativeDifference(got, expected), 2e-2);
  EXPECT_EQ(split_stats.solves, whole_stats.solves);  // merged over the ranks

  // Slot 1 by CopySlot with blocks 4-5; slot 2 by export and import into blocks 8-9.
  ASSERT_TRUE(tp.CopySlot(0, 1).ok());
  std::string state;
  ASSERT_TRUE(tp.ExportSlot(0, &state).ok());
  EXPECT_EQ(static_cast<int64_t>(state.size()), tp.state_bytes_per_slot());
  ASSERT_TRUE(tp.ImportSlot(2, state, tp.SlotPosition(0)).ok());
  for (int32_t b = 0; b < 2; ++b) {
    ASSERT_TRUE(tp.CopyKvBlock(b, 4 + b).ok());
    std::string block;
    ASSERT_TRUE(tp.ExportKvBlock(b, &block).ok());
    ASSERT_TRUE(tp.ImportKvBlock(8 + b, block).ok());
  }
  EXPECT_FALSE(tp.ImportSlot(1, state.substr(1), 30).ok());  // a short state is refused
  const std::vector<int32_t> next = {7};
  const std::vector<int32_t> tables[] = {table, {4, 5}, {8, 9}};
  std::vector<float> outputs[3];
  std::vector<int32_t> picks[3];
  for (int64_t slot = 0; slot < 3; ++slot) {
    const SlotChunk step{
        .slot = slot, .tokens = next, .solver = {1e-3f, 30}, .kv_blocks = tables[slot]};
    ASSERT_TRUE(tp.Forward({&step, 1}, LogitsFor::kLastToken, &outputs[slot]).ok());
    const std::vector<int32_t> again = {static_cast<int32_t>(
        std::max_element(outputs[slot].begin(), outputs[slot].end()) - outputs[slot].begin())};
    const SlotChunk pick{
        .slot = slot, .tokens = again, .solver = {1e-3f, 30}, .kv_blocks = tables[slot]};
    ASSERT_TRUE(tp.ForwardGreedy({&pick, 1}, &picks[slot]).ok());
    ASSERT_EQ(picks[slot].size(), 1u);
  }
  EXPECT_EQ(outputs[1], outputs[0]);
  EXPECT_EQ(outputs[2], outputs[0]);
  EXPECT_EQ(picks[1], picks[0]);
  EXPECT_EQ(picks[2], picks[0]);
}

// Host code, runs without a GPU: what loading NCCL says when it cannot.
TEST(NcclLibraryTest, NamesWhatItTriedAndWhy) {
  const absl::StatusOr<nccl::Api> missing = nccl::Open("/nonexistent/libnccl.so.2");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/libnccl.so.2"), std::string::npos)
      << missing.status();
  EXPECT_NE(missing.status().message().find("RIDGE_NCCL_LIBRARY"), std::string::npos);
  const absl::StatusOr<nccl::Api> not_nccl = nccl::Open("libm.so.6");  // loads, lacks NCCL
  ASSERT_FALSE(not_nccl.ok());
  EXPECT_NE(not_nccl.status().message().find("lacks ncclGetVersion"), std::string::npos)
      << not_nccl.status();
  if (const char* real = std::getenv("RIDGE_NCCL_LIBRARY"); real != nullptr) {
    const absl::StatusOr<nccl::Api> api = nccl::Open(real);
    ASSERT_TRUE(api.ok()) << api.status();
    EXPECT_GE(api->version, 21000);
  }
}

TEST_F(CudaTensorParallelTest, NcclCollectivesStepAsTheWholeModel) {
  const absl::StatusOr<const nccl::Api*> api = nccl::Load();
  if (!api.ok()) GTEST_SKIP() << api.status();
  std::printf("NCCL %d\n", (*api)->version);
  using Collectives = TensorParallelCudaOptions::Collectives;
  // NCCL takes one rank a GPU.
  auto shared = TensorParallelCudaBackend::Create(
      spec_, *model_->hybrid_weights(),
      {.ranks = 2, .devices = {0}, .backend = {.num_slots = 1}, .collectives = Collectives::kNccl});
  ASSERT_FALSE(shared.ok());
  EXPECT_NE(shared.status().message().find("one rank a GPU"), std::string::npos) << shared.status();

  // One rank: every sum and gather goes through NCCL (a group of one), graphs included.
  auto split = TensorParallelCudaBackend::Create(
      spec_, *model_->hybrid_weights(),
      {.ranks = 1,
       .devices = {0},
       .backend = {.num_slots = kSlots, .num_kv_blocks = kBlocks, .kv_block_size = kBlockSize},
       .collectives = Collectives::kNccl});
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ((*split)->collectives().rfind("NCCL ", 0), 0u) << (*split)->collectives();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 25; ++i) prompt.push_back((i * 29 + 3) % 1003);
  const std::vector<int32_t> table = {0, 1, 2};
  SlotChunk chunk{.slot = 1, .tokens = prompt, .solver = {0.0f, 30}, .kv_blocks = table};
  std::vector<float> expected, got;
  ASSERT_TRUE(whole_->Forward({&chunk, 1}, LogitsFor::kLastToken, &expected).ok());
  ASSERT_TRUE((*split)->Forward({&chunk, 1}, LogitsFor::kLastToken, &got).ok());
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_LT(RelativeDifference(got, expected), 2e-2);
  // Decode steps (the split replays them from graphs that captured NCCL's calls), fed the
  // whole model's greedy tokens.
  std::vector<int32_t> next(1);
  for (int step = 0; step < 6; ++step) {
    next[0] =
        static_cast<int32_t>(std::max_element(expected.begin(), expected.end()) - expected.begin());
    chunk.tokens = next;
    ASSERT_TRUE(whole_->Forward({&chunk, 1}, LogitsFor::kLastToken, &expected).ok());
    ASSERT_TRUE((*split)->Forward({&chunk, 1}, LogitsFor::kLastToken, &got).ok());
    EXPECT_LT(RelativeDifference(got, expected), 2e-2) << "step " << step;
  }
  EXPECT_EQ((*split)->graph_replays(), 6 - 1);  // the first step of a bucket is captured
  std::vector<int32_t> picked;
  ASSERT_TRUE((*split)->ForwardGreedy({&chunk, 1}, &picked).ok());
  EXPECT_EQ(picked.size(), 1u);
}

}  // namespace
}  // namespace ridge
