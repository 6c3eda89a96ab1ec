#include "models/mesanet_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/scoring.h"
#include "tests/unit/test_checkpoint_writer.h"

namespace ridge {
namespace {

class MesaNetModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto config = testing::SmallMesaConfig(/*output_gate=*/true);
    const auto dir =
        testing::WriteMesaCheckpoint("model_test", config, testing::RandomMesaTensors(config, 42));
    auto model = MesaNetModel::Load(dir);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    for (int i = 0; i < 40; ++i) ids_.push_back((i * 7 + 3) % 50);
  }

  std::vector<float> Run(MesaState& state, std::span<const int32_t> ids, SolvePhase phase,
                         LogitsFor which, SolverStats* stats = nullptr,
                         SolverOptions solver = SolverOptions{}) {
    SequenceChunk chunk{&state, ids, solver, stats, phase};
    std::vector<float> logits;
    EXPECT_TRUE(model_->Forward({&chunk, 1}, which, &logits).ok());
    return logits;
  }

  static double MaxAbsDiff(std::span<const float> a, std::span<const float> b) {
    EXPECT_EQ(a.size(), b.size());
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
    return m;
  }

  std::unique_ptr<MesaNetModel> model_;
  std::vector<int32_t> ids_;
};

TEST_F(MesaNetModelTest, ChunkedPrefillEqualsOnePrefill) {
  MesaState whole = model_->NewState();
  const auto expected = Run(whole, ids_, SolvePhase::kPrefill, LogitsFor::kAllTokens);
  MesaState split = model_->NewState();
  std::vector<float> got;
  const std::span<const int32_t> all(ids_);
  for (auto [begin, end] : {std::pair{0, 1}, {1, 17}, {17, 18}, {18, 40}}) {
    const auto part =
        Run(split, all.subspan(begin, end - begin), SolvePhase::kPrefill, LogitsFor::kAllTokens);
    got.insert(got.end(), part.begin(), part.end());
  }
  EXPECT_LT(MaxAbsDiff(expected, got), 1e-4);
  EXPECT_LT(MaxAbsDiff(whole.data(), split.data()), 1e-5);
  EXPECT_EQ(split.tokens(), 40);
}

TEST_F(MesaNetModelTest, LastTokenLogitsAreTheLastRow) {
  MesaState a = model_->NewState(), b = model_->NewState();
  const auto all = Run(a, ids_, SolvePhase::kPrefill, LogitsFor::kAllTokens);
  const auto last = Run(b, ids_, SolvePhase::kPrefill, LogitsFor::kLastToken);
  ASSERT_EQ(last.size(), 50u);
  EXPECT_LT(MaxAbsDiff(last, std::span<const float>(all).subspan(39 * 50, 50)), 1e-5);
}

TEST_F(MesaNetModelTest, SnapshotRestoreContinuesIdentically) {
  MesaState state = model_->NewState();
  const std::span<const int32_t> all(ids_);
  Run(state, all.subspan(0, 25), SolvePhase::kPrefill, LogitsFor::kLastToken);
  const std::string snapshot = state.Serialize();
  const auto expected = Run(state, all.subspan(25), SolvePhase::kDecode, LogitsFor::kAllTokens);

  auto restored = MesaState::Deserialize(model_->config(), snapshot);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->tokens(), 25);
  MesaState copy = *restored;  // a state is a value: copies are independent
  EXPECT_EQ(
      MaxAbsDiff(Run(copy, all.subspan(25), SolvePhase::kDecode, LogitsFor::kAllTokens), expected),
      0.0);
  EXPECT_EQ(MaxAbsDiff(copy.data(), state.data()), 0.0);
  EXPECT_EQ(restored->tokens(), 25);

  EXPECT_FALSE(MesaState::Deserialize(model_->config(), snapshot.substr(0, 100)).ok());
  std::string corrupt = snapshot;
  corrupt[0] = 'X';
  EXPECT_FALSE(MesaState::Deserialize(model_->config(), corrupt).ok());
  MesaNetConfig other = model_->config();
  other.num_heads = 4;
  EXPECT_NE(MesaState::Deserialize(other, snapshot).status().message().find("does not match"),
            std::string::npos);
}

TEST_F(MesaNetModelTest, BatchedDecodeEqualsSeparateDecode) {
  constexpr int kSequences = 5;
  std::vector<MesaState> batched, alone;
  for (int s = 0; s < kSequences; ++s) {
    batched.push_back(model_->NewState());
    Run(batched.back(), std::span<const int32_t>(ids_).subspan(s, 10 + s), SolvePhase::kPrefill,
        LogitsFor::kLastToken);
    alone.push_back(batched.back());
  }
  std::vector<int32_t> next = {1, 2, 3, 4, 5};
  std::vector<SequenceChunk> chunks;
  for (int s = 0; s < kSequences; ++s) {
    // Different budgets per sequence in one batch.
    chunks.push_back({&batched[s],
                      {&next[s], 1},
                      SolverOptions{s * 1e-3f, 30 - s},
                      nullptr,
                      SolvePhase::kDecode});
  }
  std::vector<float> logits;
  ASSERT_TRUE(model_->Forward(chunks, LogitsFor::kLastToken, &logits).ok());
  for (int s = 0; s < kSequences; ++s) {
    SequenceChunk one{
        &alone[s], {&next[s], 1}, SolverOptions{s * 1e-3f, 30 - s}, nullptr, SolvePhase::kDecode};
    std::vector<float> expected;
    ASSERT_TRUE(model_->Forward({&one, 1}, LogitsFor::kLastToken, &expected).ok());
    EXPECT_LT(MaxAbsDiff(expected, std::span<const float>(logits).subspan(s * 50, 50)), 1e-4) << s;
  }
}

TEST_F(MesaNetModelTest, SolverStatsCountEverySolve) {
  MesaState state = model_->NewState();
  SolverStats stats;
  // Fewer iterations than head_dim (16), so no solve can converge exactly and stop early.
  Run(state, ids_, SolvePhase::kPrefill, LogitsFor::kLastToken, &stats, SolverOptions{0.0f, 8});
  const auto& c = model_->config();
  EXPECT_EQ(stats.solves, 40 * c.num_hidden_layers * c.num_heads);
  EXPECT_EQ(stats.total_iterations, stats.solves * 8);  // tolerance 0: every iteration runs
  EXPECT_EQ(stats.capped, stats.solves);

  auto loose = ScoreSequence(*model_, ids_, std::nullopt, SolverOptions{1e-2f, 30});
  ASSERT_TRUE(loose.ok());
  EXPECT_LT(loose->solver_stats.MeanIterations(), 30.0);
  EXPECT_LE(loose->solver_stats.max_relative_residual, 1e-2f + 1e-7f);
}

TEST_F(MesaNetModelTest, RejectsBadInputs) {
  MesaState state = model_->NewState();
  std::vector<int32_t> bad = {1, 50};
  SequenceChunk chunk{&state, bad, SolverOptions{}, nullptr};
  std::vector<float> logits;
  auto status = model_->Forward({&chunk, 1}, LogitsFor::kLastToken, &logits);
  EXPECT_NE(status.message().find("token id 50 is outside"), std::string::npos) << status;
  EXPECT_EQ(state.tokens(), 0);  // nothing was consumed
  chunk.tokens = {};
  EXPECT_FALSE(model_->Forward({&chunk, 1}, LogitsFor::kLastToken, &logits).ok());
  std::vector<int32_t> good = {1};
  chunk.tokens = good;
  chunk.solver.max_iterations = 0;
  EXPECT_FALSE(model_->Forward({&chunk, 1}, LogitsFor::kLastToken, &logits).ok());
  EXPECT_FALSE(ScoreSequence(*model_, ids_, 0, SolverOptions{}).ok());
  EXPECT_FALSE(ScoreSequence(*model_, ids_, 41, SolverOptions{}).ok());
}

}  // namespace
}  // namespace ridge
