// Tensor parallelism's split (models/tensor_parallel.h, models/tensor_parallel_weights.h): the
// plan's ranges and refusals, and the sharded math on the CPU. Every rank of a random hybrid
// (GKA with GQA-expanded heads, full attention and sliding-window attention with fewer key/value
// heads than ranks, an MLP width and a vocabulary that do not divide) runs its share of each layer
// through the CPU mixers; the partial sums of o_proj and down_proj are added as an all-reduce
// would, the embedding's vocabulary slices likewise, and the output layer's slices concatenated.
// Over a prompt and decode steps the logits equal the unsharded CpuDecoder's within fp32
// rounding.
#include "models/tensor_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/weight_gemm.h"
#include "models/arch/hybrid_qwen3.h"
#include "models/cpu/attention_mixer.h"
#include "models/cpu/decoder.h"
#include "models/cpu/gka_mixer.h"
#include "models/tensor_parallel_weights.h"
#include "tests/unit/small_hybrid_spec.h"

namespace ridge {
namespace {

constexpr int64_t kBlockSize = 4;

TEST(TensorParallelPlanTest, OneRankOwnsEverything) {
  const ModelSpec spec = SmallHybrid();
  auto plan = PlanTensorParallel(spec, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 1u);
  const RankShard& only = (*plan)[0];
  EXPECT_EQ(only.vocab, (IndexRange{0, 103}));
  const GkaShard& gka = std::get<GkaShard>(only.layers[0].mixer);
  EXPECT_EQ(gka.expanded, (IndexRange{0, 4}));
  EXPECT_EQ(gka.k, (IndexRange{0, 2}));
  EXPECT_EQ(std::get<AttentionShard>(only.layers[1].mixer).kv, (IndexRange{0, 2}));
  EXPECT_EQ(only.layers[2].intermediate, (IndexRange{0, 96}));
}

TEST(TensorParallelPlanTest, HeadsSplitOrReplicateAndWidthsSplitUnevenly) {
  const ModelSpec spec = SmallHybrid();
  auto plan = PlanTensorParallel(spec, 4);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int64_t vocab_next = 0;
  for (int32_t r = 0; r < 4; ++r) {
    const RankShard& shard = (*plan)[r];
    EXPECT_EQ(shard.vocab.first, vocab_next);
    vocab_next = shard.vocab.end();
    EXPECT_EQ(shard.vocab.count, r < 3 ? 26 : 25);  // 103 = 3 x 26 + 25
    EXPECT_EQ(shard.layers[0].intermediate, (IndexRange{r * 22 + std::min(r, 2), r < 2 ? 23 : 22}));
    const GkaShard& gka = std::get<GkaShard>(shard.layers[0].mixer);
    EXPECT_EQ(gka.expanded, (IndexRange{r, 1}));
    EXPECT_EQ(gka.q, (IndexRange{r, 1}));
    EXPECT_EQ(gka.k, (IndexRange{r / 2, 1}));  // two ranks share each k head
    const AttentionShard& full = std::get<AttentionShard>(shard.layers[1].mixer);
    EXPECT_EQ(full.q, (IndexRange{2 * r, 2}));
    EXPECT_EQ(full.kv, (IndexRange{r / 2, 1}));
    EXPECT_EQ(std::get<AttentionShard>(shard.layers[2].mixer).kv, (IndexRange{0, 1}));
    const GkaShard& wide_v = std::get<GkaShard>(shard.layers[3].mixer);
    EXPECT_EQ(wide_v.expanded, (IndexRange{r, 1}));  // 4 expanded heads: the v heads
    EXPECT_EQ(wide_v.v, (IndexRange{r, 1}));
    EXPECT_EQ(wide_v.q, (IndexRange{r / 2, 1}));
    const ModelSpec local = RankSpec(spec, shard);
    EXPECT_EQ(std::get<GkaSpec>(local.layers[3].mixer).expanded_heads(), 1);
    EXPECT_EQ(std::get<AttentionSpec>(local.layers[1].mixer).q_heads, 2);
    EXPECT_EQ(local.layers[2].intermediate_size, 24);
    EXPECT_EQ(local.vocab_size, 103);  // token ids stay global
  }
  EXPECT_EQ(vocab_next, 103);
}

TEST(TensorParallelPlanTest, RefusesWhatDoesNotSplitNamingIt) {
  const ModelSpec spec = SmallHybrid();
  auto three = PlanTensorParallel(spec, 3);
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.status().message().find("layer 0 (GKA): 4 heads do not split evenly over 3"),
            std::string::npos)
      << three.status();
  ModelSpec odd_kv = spec;
  odd_kv.layers = {{Attention(6, 3, 16), 90}};
  auto two = PlanTensorParallel(odd_kv, 2);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("layer 0 (key/value): 3 heads neither split over 2"),
            std::string::npos)
      << two.status();
  ModelSpec mesa = spec;
  mesa.layers[1].mixer = MesaSpec{.heads = 4, .head_dim = 16};
  auto refused = PlanTensorParallel(mesa, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("layer 1 is a MesaNet layer"), std::string::npos);
  EXPECT_FALSE(PlanTensorParallel(spec, 0).ok());
  ModelSpec narrow = spec;
  narrow.layers[2].intermediate_size = 3;
  EXPECT_NE(PlanTensorParallel(narrow, 4).status().message().find("layer 2: an MLP of 3 columns"),
            std::string::npos);
  ModelSpec tiny_vocab = spec;
  tiny_vocab.vocab_size = 3;
  EXPECT_FALSE(PlanTensorParallel(tiny_vocab, 4).ok());
}

// One rank: its spec, its weights, its mixers and its own states and KV blocks.
class Rank {
 public:
  Rank(const ModelSpec& spec, const HybridWeights& full, RankShard shard, int64_t sequences,
       int64_t kv_blocks)
      : shard_(std::move(shard)),
        spec_(RankSpec(spec, shard_)),
        weights_(SliceRankWeights(spec, full, shard_)),
        recurrent_(PlanRecurrentLayout(spec_)),
        kv_(PlanKvLayout(spec_, kBlockSize)),
        states_(sequences * recurrent_.floats_per_slot, 0.0f),
        kv_storage_(std::max<int64_t>(1, kv_blocks * kv_.floats_per_block()), 0.0f),
        layers_(HybridDecoderWeights(spec_, weights_.weights, kBlockSize).layers) {}

  const RankShard& shard() const { return shard_; }
  const HybridWeights& weights() const { return weights_.weights; }

  // The sequences as this rank sees them: its own state slots and KV storage.
  MixerBatch Batch(std::vector<CpuSequence>& sequences) {
    MixerBatch batch{.sequences = sequences, .kv_storage = kv_storage_.data(), .kv_layout = &kv_};
    for (size_t i = 0; i < sequences.size(); ++i) {
      sequences[i].state = states_.data() + i * recurrent_.floats_per_slot;
      batch.first_row.push_back(batch.rows);
      batch.rows += static_cast<int64_t>(sequences[i].tokens.size());
    }
    return batch;
  }

  // partial[rows, C] = this rank's share of layer l's mixer output (before the all-reduce).
  void Mixer(size_t l, const MixerBatch& batch, const float* normed, float* partial) const {
    layers_[l].mixer->Forward(batch, normed, partial);
  }

  // partial[rows, C] = this rank's share of layer l's MLP output.
  void Mlp(size_t l, int64_t rows, const float* normed, float* partial) const {
    const HybridLayerWeights& w = weights_.weights.layers[l];
    const WeightMatrix gate_up[] = {w.gate, w.up};
    SwiGluMlp(gate_up, w.down, rows, spec_.hidden_size, normed, partial, false);
  }

 private:
  RankShard shard_;
  ModelSpec spec_;
  RankWeights weights_;
  RecurrentLayout recurrent_;
  KvLayout kv_;
  std::vector<float> states_, kv_storage_;
  std::vector<DecoderLayerWeights> layers_;  // the rank's mixers
};

// logits[rows, V] of every token of a step through the ranks, reduced as the collectives would.
std::vector<float> ShardedForward(const ModelSpec& spec, std::vector<Rank>& ranks,
                                  std::vector<std::vector<CpuSequence>>& rank_sequences) {
  const int64_t c = spec.hidden_size, v = spec.vocab_size;
  const float eps = static_cast<float>(spec.rms_norm_eps);
  std::vector<MixerBatch> batches;
  for (size_t r = 0; r < ranks.size(); ++r) batches.push_back(ranks[r].Batch(rank_sequences[r]));
  const int64_t rows = batches[0].rows;
  std::vector<float> hidden(rows * c, 0.0f), normed(rows * c), partial(rows * c), sum(rows * c);
  // The vocabulary-parallel embedding: each rank's rows for the tokens in its slice.
  for (Rank& rank : ranks) {
    const IndexRange vocab = rank.shard().vocab;
    int64_t row = 0;
    for (const CpuSequence& s : rank_sequences[0]) {
      for (int32_t token : s.tokens) {
        if (token >= vocab.first && token < vocab.end()) {
          WeightRowToFloat(rank.weights().embedding, token - vocab.first, partial.data());
          for (int64_t i = 0; i < c; ++i) hidden[row * c + i] += partial[i];
        }
        ++row;
      }
    }
  }
  auto all_reduce_into_hidden = [&](auto&& rank_part) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (size_t r = 0; r < ranks.size(); ++r) {
      std::fill(partial.begin(), partial.end(), 0.0f);
      rank_part(r);
      for (int64_t i = 0; i < rows * c; ++i) sum[i] += partial[i];
    }
    for (int64_t i = 0; i < rows * c; ++i) hidden[i] += sum[i];
  };
  const HybridWeights& any = ranks[0].weights();  // norms are replicated
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    RmsNormRows(hidden.data(), any.layers[l].input_norm.data(), rows, c, eps, normed.data());
    all_reduce_into_hidden(
        [&](size_t r) { ranks[r].Mixer(l, batches[r], normed.data(), partial.data()); });
    RmsNormRows(hidden.data(), any.layers[l].post_norm.data(), rows, c, eps, normed.data());
    all_reduce_into_hidden([&](size_t r) { ranks[r].Mlp(l, rows, normed.data(), partial.data()); });
  }
  RmsNormRows(hidden.data(), any.final_norm.data(), rows, c, eps, normed.data());
  std::vector<float> logits(rows * v);
  for (Rank& rank : ranks) {  // each rank's columns of the logits: a gather
    MatMulWeights(normed.data(), rows, rank.weights().head,
                  logits.data() + rank.shard().vocab.first, v, false);
  }
  return logits;
}

class TensorParallelMathTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(TensorParallelMathTest, ShardedLogitsEqualTheUnshardedModel) {
  const int32_t num_ranks = GetParam();
  const ModelSpec spec = SmallHybrid();
  auto model = HybridQwen3Model::Random(spec, 11, kBlockSize);
  ASSERT_TRUE(model.ok()) << model.status();
  const CpuDecoder& decoder = (*model)->decoder();
  auto plan = PlanTensorParallel(spec, num_ranks);
  ASSERT_TRUE(plan.ok()) << plan.status();

  // Two sequences: prompts of 7 and 12 tokens (across KV blocks of 4 and the window of 5), then
  // three decode steps; caps of 30 and 10 iterations.
  const std::vector<std::vector<int32_t>> prompts = {{5, 99, 17, 42, 0, 63, 102},
                                                     {8, 8, 31, 77, 12, 54, 90, 1, 26, 51, 76, 3}};
  const int64_t n = static_cast<int64_t>(prompts.size()), max_positions = 16;
  const int64_t blocks_each = max_positions / kBlockSize;
  std::vector<std::vector<int32_t>> tables(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t b = 0; b < blocks_each; ++b) tables[i].push_back((n - 1 - i) * blocks_each + b);
  }
  const RecurrentLayout& layout = decoder.recurrent_layout();
  std::vector<float> full_states(n * layout.floats_per_slot, 0.0f);
  std::vector<float> full_kv(n * blocks_each * decoder.kv_layout().floats_per_block(), 0.0f);
  std::vector<Rank> ranks;
  for (const RankShard& shard : *plan) {
    ranks.emplace_back(spec, *(*model)->hybrid_weights(), shard, n, n * blocks_each);
  }

  std::vector<std::vector<int32_t>> step_tokens = prompts;
  std::vector<int64_t> positions(n, 0);
  for (int step = 0; step < 4; ++step) {
    std::vector<CpuSequence> sequences(n);
    for (int64_t i = 0; i < n; ++i) {
      sequences[i].state = full_states.data() + i * layout.floats_per_slot;
      sequences[i].position = positions[i];
      sequences[i].kv_blocks = tables[i];
      sequences[i].tokens = step_tokens[i];
      sequences[i].solver = {0.0f, i == 0 ? 30 : 10};
    }
    std::vector<float> expected;
    ASSERT_TRUE(decoder.Forward(sequences, full_kv.data(), LogitsFor::kAllTokens, &expected).ok());
    std::vector<std::vector<CpuSequence>> rank_sequences(ranks.size(), sequences);
    const std::vector<float> got = ShardedForward(spec, ranks, rank_sequences);
    ASSERT_EQ(got.size(), expected.size());
    double largest = 0, worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      largest = std::max(largest, std::abs(double(expected[i])));
      worst = std::max(worst, std::abs(double(got[i]) - expected[i]));
    }
    // fp32 sums in another order. The prompt's first tokens solve on Gram matrices of rank 1 or 2
    // (a ridge of 0.02 ||Hs||), which amplify the last bits of q and k: a GKA layer alone differs
    // by 4e-5 of the largest logit there (by 5e-6 with a ridge of 0.1), attention and MLP layers
    // by 4e-7; the states carry it into the decode steps. A wrong slice (a rank reading another
    // rank's k rows or o_proj columns) differs by more than the largest logit.
    EXPECT_LT(worst, (step == 0 ? 1e-3 : 2e-4) * largest) << num_ranks << " ranks, step " << step;
    // The next step: each sequence's greedy token of its last row.
    int64_t row = 0;
    for (int64_t i = 0; i < n; ++i) {
      row += static_cast<int64_t>(step_tokens[i].size());
      const float* last = &expected[(row - 1) * spec.vocab_size];
      positions[i] += static_cast<int64_t>(step_tokens[i].size());
      step_tokens[i] = {
          static_cast<int32_t>(std::max_element(last, last + spec.vocab_size) - last)};
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, TensorParallelMathTest, ::testing::Values(1, 2, 4));

}  // namespace
}  // namespace ridge
