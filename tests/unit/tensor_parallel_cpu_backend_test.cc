// The CPU's tensor-parallel backend (models/tensor_parallel_cpu_backend.h) against the plain CPU
// backend on the same random hybrid (tests/unit/small_hybrid_spec.h): over 1, 2 and 4 ranks on
// threads, prompts that cross KV blocks and the sliding window, then decode steps, give the same
// logits within fp32 rounding and the same solver counts; slots and blocks copied, exported and
// imported across the ranks continue as the originals do; bad input is refused naming it, and the
// backend steps on after an error.
#include "models/tensor_parallel_cpu_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "models/arch/hybrid_qwen3.h"
#include "models/cpu_backend.h"
#include "tests/unit/small_hybrid_spec.h"

namespace ridge {
namespace {

constexpr int64_t kBlockSize = 4;
constexpr int64_t kSlots = 3, kBlocks = 16;

// The largest difference between two logit sets, relative to the largest logit.
double RelativeDifference(const std::vector<float>& got, const std::vector<float>& expected) {
  double largest = 0, worst = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    largest = std::max(largest, std::abs(double(expected[i])));
    worst = std::max(worst, std::abs(double(got[i]) - expected[i]));
  }
  return worst / largest;
}

class TensorParallelCpuBackendTest : public ::testing::TestWithParam<int32_t> {
 protected:
  void SetUp() override {
    auto model = HybridQwen3Model::Random(spec_, 11, kBlockSize);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    reference_ = std::make_unique<CpuBackend>(&model_->decoder(), kSlots, kBlocks);
    auto backend = TensorParallelCpuBackend::Create(spec_, *model_->hybrid_weights(),
                                                    {.ranks = GetParam(),
                                                     .num_slots = kSlots,
                                                     .num_kv_blocks = kBlocks,
                                                     .kv_block_size = kBlockSize});
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
  }

  const ModelSpec spec_ = SmallHybrid();
  std::unique_ptr<HybridQwen3Model> model_;
  std::unique_ptr<CpuBackend> reference_;
  std::unique_ptr<TensorParallelCpuBackend> backend_;
};

TEST_P(TensorParallelCpuBackendTest, StepsAsTheUnsplitModel) {
  EXPECT_EQ(backend_->ranks(), GetParam());
  EXPECT_EQ(backend_->num_slots(), kSlots);
  EXPECT_EQ(backend_->num_kv_blocks(), kBlocks);
  EXPECT_EQ(backend_->kv_layout().block_size, kBlockSize);
  // Replicated key/value heads take more memory over more ranks, never less.
  EXPECT_GE(backend_->kv_layout().bytes_per_block(), reference_->kv_layout().bytes_per_block());
  EXPECT_EQ(GetParam() == 1,
            backend_->state_bytes_per_slot() == reference_->state_bytes_per_slot());

  // Prompts of 7 and 12 tokens in slots 2 and 0 (blocks 0-3 and 8-11), then decode steps with
  // the reference's greedy tokens; caps of 30 and 10 iterations.
  std::vector<std::vector<int32_t>> tokens = {{5, 99, 17, 42, 0, 63, 102},
                                              {8, 8, 31, 77, 12, 54, 90, 1, 26, 51, 76, 3}};
  const int64_t slots[] = {2, 0};
  const std::vector<int32_t> tables[] = {{0, 1, 2, 3}, {8, 9, 10, 11}};
  for (int step = 0; step < 4; ++step) {
    SolverStats expected_stats[2], got_stats[2];
    std::vector<SlotChunk> expected_chunks, got_chunks;
    for (int i = 0; i < 2; ++i) {
      SlotChunk chunk{.slot = slots[i],
                      .tokens = tokens[i],
                      .solver = {0.0f, i == 0 ? 30 : 10},
                      .kv_blocks = tables[i]};
      chunk.stats = &expected_stats[i];
      expected_chunks.push_back(chunk);
      chunk.stats = &got_stats[i];
      got_chunks.push_back(chunk);
    }
    std::vector<float> expected, got;
    ASSERT_TRUE(reference_->Forward(expected_chunks, LogitsFor::kAllTokens, &expected).ok());
    ASSERT_TRUE(backend_->Forward(got_chunks, LogitsFor::kAllTokens, &got).ok());
    ASSERT_EQ(got.size(), expected.size());
    // As in tensor_parallel_test: the prompt's rank-deficient first solves amplify fp32 rounding.
    EXPECT_LT(RelativeDifference(got, expected), step == 0 ? 1e-3 : 2e-4) << "step " << step;
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(got_stats[i].solves, expected_stats[i].solves);
      EXPECT_EQ(got_stats[i].total_iterations, expected_stats[i].total_iterations);
      EXPECT_EQ(backend_->SlotPosition(slots[i]), reference_->SlotPosition(slots[i]));
    }
    int64_t row = 0;
    for (int i = 0; i < 2; ++i) {
      row += static_cast<int64_t>(tokens[i].size());
      const float* last = &expected[(row - 1) * spec_.vocab_size];
      tokens[i] = {static_cast<int32_t>(std::max_element(last, last + spec_.vocab_size) - last)};
    }
  }

  // Greedy picks come from rank 0's gathered logits.
  std::vector<int32_t> expected_next, got_next;
  const SlotChunk chunk{
      .slot = 2, .tokens = tokens[0], .solver = {0.0f, 30}, .kv_blocks = tables[0]};
  ASSERT_TRUE(reference_->ForwardGreedy({&chunk, 1}, &expected_next).ok());
  ASSERT_TRUE(backend_->ForwardGreedy({&chunk, 1}, &got_next).ok());
  EXPECT_EQ(got_next, expected_next);
}

// Prompt scoring (TokenPick::score_next) through the split model: rank 0 answers for the group
// with the unsplit model's log-probabilities, ranks and alternatives.
TEST_P(TensorParallelCpuBackendTest, ScoresPromptRowsAsTheUnsplitModel) {
  const std::vector<int32_t> prompt = {5, 99, 17, 42, 0, 63, 102, 8, 31};
  const std::vector<int32_t> table = {0, 1, 2};
  const SlotChunk chunk{.slot = 1, .tokens = prompt, .solver = {0.0f, 30}, .kv_blocks = table};
  TokenPick pick;
  pick.score_next = std::span<const int32_t>(prompt).subspan(1);
  pick.score_top_logprobs = 3;
  std::vector<PickedToken> expected, got;
  ASSERT_TRUE(reference_->ForwardSample({&chunk, 1}, {&pick, 1}, &expected).ok());
  ASSERT_TRUE(backend_->ForwardSample({&chunk, 1}, {&pick, 1}, &got).ok());
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].scored.size(), prompt.size() - 1);
  for (size_t r = 0; r < got[0].scored.size(); ++r) {
    const PickedToken& g = got[0].scored[r];
    const PickedToken& e = expected[0].scored[r];
    EXPECT_EQ(g.token, prompt[r + 1]);
    EXPECT_NEAR(g.logprob, e.logprob, 1e-3) << "row " << r;
    EXPECT_EQ(g.rank, e.rank) << "row " << r;
    ASSERT_EQ(g.top.size(), 3u);
    EXPECT_EQ(g.top[0].first, e.top[0].first) << "row " << r;
  }
}

TEST_P(TensorParallelCpuBackendTest, CopiedAndImportedSlotsContinueAsTheOriginal) {
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35, 89, 79, 32};
  const std::vector<int32_t> table = {0, 1, 2};
  const SlotChunk first{.slot = 0, .tokens = prompt, .solver = {1e-3f, 30}, .kv_blocks = table};
  std::vector<float> logits;
  ASSERT_TRUE(backend_->Forward({&first, 1}, LogitsFor::kLastToken, &logits).ok());

  // Slot 1 by CopySlot with blocks 4-6 by CopyKvBlock; slot 2 by export and import into 8-10.
  ASSERT_TRUE(backend_->CopySlot(0, 1).ok());
  std::string state;
  ASSERT_TRUE(backend_->ExportSlot(0, &state).ok());
  EXPECT_EQ(static_cast<int64_t>(state.size()), backend_->state_bytes_per_slot());
  ASSERT_TRUE(backend_->ImportSlot(2, state, backend_->SlotPosition(0)).ok());
  for (int32_t b = 0; b < 3; ++b) {
    ASSERT_TRUE(backend_->CopyKvBlock(b, 4 + b).ok());
    std::string block;
    ASSERT_TRUE(backend_->ExportKvBlock(b, &block).ok());
    EXPECT_EQ(static_cast<int64_t>(block.size()), backend_->kv_layout().bytes_per_block());
    ASSERT_TRUE(backend_->ImportKvBlock(8 + b, block).ok());
  }
  EXPECT_EQ(backend_->state_format(), "cpu/fp32/tp" + std::to_string(GetParam()));

  // The same next token, one slot per step (so that no product batches them differently).
  const std::vector<int32_t> next = {7};
  const std::vector<int32_t> tables[] = {table, {4, 5, 6}, {8, 9, 10}};
  std::vector<float> outputs[3];
  for (int64_t slot = 0; slot < 3; ++slot) {
    const SlotChunk step{
        .slot = slot, .tokens = next, .solver = {1e-3f, 30}, .kv_blocks = tables[slot]};
    ASSERT_TRUE(backend_->Forward({&step, 1}, LogitsFor::kLastToken, &outputs[slot]).ok());
    EXPECT_EQ(backend_->SlotPosition(slot), 10);
  }
  EXPECT_EQ(outputs[1], outputs[0]);
  EXPECT_EQ(outputs[2], outputs[0]);

  // Reset: back to position 0 on every rank.
  ASSERT_TRUE(backend_->ResetSlot(1).ok());
  EXPECT_EQ(backend_->SlotPosition(1), 0);
}

TEST_P(TensorParallelCpuBackendTest, RefusesBadInputNamingItAndStepsOn) {
  std::string state(backend_->state_bytes_per_slot() - 4, '\0');
  absl::Status short_state = backend_->ImportSlot(0, state, 3);
  EXPECT_EQ(short_state.code(), absl::StatusCode::kInvalidArgument);
  std::string block(7, '\0');
  EXPECT_FALSE(backend_->ImportKvBlock(0, block).ok());
  EXPECT_FALSE(backend_->CopySlot(0, kSlots).ok());
  EXPECT_FALSE(backend_->CopyKvBlock(0, kBlocks).ok());

  const std::vector<int32_t> bad = {5, 103};  // past the vocabulary
  const std::vector<int32_t> table = {0, 1};
  const SlotChunk chunk{.slot = 0, .tokens = bad, .solver = {0.0f, 30}, .kv_blocks = table};
  std::vector<float> logits;
  const absl::Status refused = backend_->Forward({&chunk, 1}, LogitsFor::kLastToken, &logits);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("103"), std::string::npos) << refused;
  const std::vector<int32_t> no_blocks;  // positions without KV blocks: refused by every rank
  const std::vector<int32_t> good = {5, 6};
  const SlotChunk uncovered{
      .slot = 0, .tokens = good, .solver = {0.0f, 30}, .kv_blocks = no_blocks};
  EXPECT_FALSE(backend_->Forward({&uncovered, 1}, LogitsFor::kLastToken, &logits).ok());

  // KV block tables: a block outside the pool, one written by two sequences, one read by a
  // sequence while another writes into it (each sequence writes the block of its position 0).
  auto refusal = [&](std::vector<SlotChunk> chunks) {
    return std::string(backend_->Forward(chunks, LogitsFor::kLastToken, &logits).message());
  };
  const std::vector<int32_t> outside = {0, kBlocks};
  EXPECT_NE(refusal({{.slot = 0, .tokens = good, .solver = {0.0f, 30}, .kv_blocks = outside}})
                .find(absl::StrCat("sequence 0: KV block ", kBlocks, " is outside [0, ", kBlocks)),
            std::string::npos);
  const std::vector<int32_t> reading_zero = {1, 0};
  EXPECT_NE(refusal({{.slot = 0, .tokens = good, .solver = {0.0f, 30}, .kv_blocks = table},
                     {.slot = 1, .tokens = good, .solver = {0.0f, 30}, .kv_blocks = table}})
                .find("sequence 1: KV block 0 is written by two sequences in one step"),
            std::string::npos);
  const std::vector<int32_t> only_zero = {0};
  EXPECT_NE(refusal({{.slot = 0, .tokens = good, .solver = {0.0f, 30}, .kv_blocks = only_zero},
                     {.slot = 1, .tokens = good, .solver = {0.0f, 30}, .kv_blocks = reading_zero}})
                .find("sequence 1: KV block 0 is read while sequence 0 writes into it"),
            std::string::npos);

  const SlotChunk fine{.slot = 0, .tokens = good, .solver = {0.0f, 30}, .kv_blocks = table};
  ASSERT_TRUE(backend_->Forward({&fine, 1}, LogitsFor::kLastToken, &logits).ok());
  EXPECT_EQ(logits.size(), static_cast<size_t>(spec_.vocab_size));
}

INSTANTIATE_TEST_SUITE_P(Ranks, TensorParallelCpuBackendTest, ::testing::Values(1, 2, 4));

TEST(TensorParallelCpuBackendCreateTest, RefusesWhatDoesNotSplit) {
  const ModelSpec spec = SmallHybrid();
  auto model = HybridQwen3Model::Random(spec, 3, kBlockSize);
  ASSERT_TRUE(model.ok());
  auto three = TensorParallelCpuBackend::Create(spec, *(*model)->hybrid_weights(),
                                                {.ranks = 3, .num_slots = 1, .kv_block_size = 4});
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.status().message().find("do not split evenly over 3"), std::string::npos)
      << three.status();
  auto footprint = TensorParallelCpuBackend::Footprint(spec, 2, kBlockSize);
  ASSERT_TRUE(footprint.ok());
  auto two = TensorParallelCpuBackend::Create(spec, *(*model)->hybrid_weights(),
                                              {.ranks = 2, .num_slots = 1, .kv_block_size = 4});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(footprint->state_bytes_per_slot, (*two)->state_bytes_per_slot());
  EXPECT_EQ(footprint->kv_bytes_per_block, (*two)->kv_layout().bytes_per_block());
}

}  // namespace
}  // namespace ridge
