// The GPU sampler (kernels/cuda/token_sampling.h) against the CPU's (sampling/sampler.h), which
// is an independent implementation of the same rule: for every row the token must be the one
// Sampler::SampleWithUniform picks with the same uniform, the log-probabilities those of
// TokenLogprob / TopLogprobs, and the logits left in global memory the penalised ones of
// Sampler::ApplyPenalties. Rows of 50257 and 1000 tokens with padded strides, random and
// quantised (heavily tied) logits, NaN / -inf / +inf entries, greedy, temperatures, top-k,
// top-p, min-p, penalties and their combinations; plus the draw's frequencies over a regular grid
// of uniforms. Skips without a GPU.
#include "kernels/cuda/token_sampling.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/device_info.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"
#include "tests/gpu/device_array.h"

namespace ridge::cuda {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kPadding = 1e30f;  // between rows; it would win every selection if it were read
constexpr int kRowsPerLaunch = 64;

float Clean(float logit) { return std::isnan(logit) ? -kInf : logit; }

SamplingParams Params(float temperature, int32_t top_k = 0, float top_p = 1.0f, float min_p = 0.0f,
                      float repetition = 1.0f, float frequency = 0.0f, float presence = 0.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repetition_penalty = repetition;
  p.frequency_penalty = frequency;
  p.presence_penalty = presence;
  p.seed = 1;  // the uniform is given; this only keeps Create off std::random_device
  return p;
}

std::vector<SamplingParams> ParameterSets() {
  return {
      Params(0.0f),                                      // greedy
      Params(0.0f, 0, 1.0f, 0.0f, 1.3f, 0.5f, 0.7f),     // greedy with penalties
      Params(0.7f),                                      //
      Params(1.0f),                                      //
      Params(1.5f),                                      //
      Params(1.0f, 1),                                   // top-k
      Params(1.0f, 5),                                   //
      Params(0.7f, 50),                                  //
      Params(1.5f, 2000),                                // (off at vocab 1000)
      Params(1.0f, 0, 0.9f),                             // top-p
      Params(1.0f, 0, 0.5f),                             //
      Params(1.5f, 0, 0.01f),                            //
      Params(1.0f, 0, 1.0f, 0.05f),                      // min-p
      Params(0.7f, 50, 0.9f),                            // combinations
      Params(1.5f, 2000, 0.5f, 0.05f),                   //
      Params(1.0f, 1024, 0.9f),                          // the largest k kept on chip
      Params(1.0f, 5, 0.9f, 0.05f),                      //
      Params(1.0f, 0, 1.0f, 0.0f, 1.3f),                 // penalties
      Params(1.0f, 0, 1.0f, 0.0f, 0.8f),                 //
      Params(0.7f, 0, 1.0f, 0.0f, 1.0f, 0.5f, 0.7f),     //
      Params(1.0f, 50, 0.9f, 0.0f, 1.3f, 0.5f, 0.7f),    //
      Params(1.5f, 0, 0.9f, 0.05f, 0.8f, 0.5f, 0.7f),    //
      Params(0.0f, 0, 1.0f, 0.0f, 0.8f, 0.0f, 0.7f),     //
      Params(1.0f, 2000, 0.5f, 0.0f, 1.3f, 0.5f, 0.0f),  //
  };
}

struct RowCase {
  std::vector<float> logits;  // vocab_size raw logits
  SamplingParams params;
  std::vector<int32_t> prompt, generated;
  double uniform = 0.0;
  bool logprobs = true;
  int32_t top_logprobs = 0;
};

enum class LogitKind { kRandom, kQuantised };

// Normal logits at a random scale; quantised ones tie in large groups (and include -0 and +0).
// Some rows get NaN and -inf entries, a few +inf entries, or nothing but -inf and NaN.
std::vector<float> RandomLogits(int vocab, LogitKind kind, int row, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float scales[] = {1.0f, 2.5f, 6.0f};
  const float scale = scales[row % 3];
  std::vector<float> logits(vocab);
  for (float& x : logits) {
    x = scale * normal(rng);
    if (kind == LogitKind::kQuantised) x = std::round(x * 2.0f) / 2.0f;  // -0 for small negatives
  }
  std::uniform_int_distribution<int> token(0, vocab - 1);
  if (row % 7 == 3) {
    for (int i = 0; i < vocab / 20; ++i) logits[token(rng)] = i % 2 == 0 ? kNaN : -kInf;
  }
  if (row % 11 == 5) {
    for (int i = 0; i < 3; ++i) logits[token(rng)] = kInf;
  }
  if (row % 29 == 13) {
    for (int i = 0; i < vocab; ++i) logits[i] = i % 3 == 0 ? kNaN : -kInf;
  }
  if (row % 31 == 17) {  // a single possible token, not the lowest id
    std::fill(logits.begin(), logits.end(), -kInf);
    logits[vocab / 2 + 1] = normal(rng);
  }
  return logits;
}

// A prompt and generated tokens, half of them among the best 40 tokens so that penalties change
// the outcome; the generated ones repeat (frequency counts above 1).
void RandomHistory(std::mt19937_64& rng, RowCase* row) {
  const int vocab = static_cast<int>(row->logits.size());
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  const int num_best = std::min(vocab, 40);
  std::partial_sort(
      order.begin(), order.begin() + num_best, order.end(),
      [&](int32_t a, int32_t b) { return Clean(row->logits[a]) > Clean(row->logits[b]); });
  std::uniform_int_distribution<int> any(0, vocab - 1), best(0, num_best - 1), coin(0, 1);
  auto pick = [&] { return coin(rng) == 0 ? order[best(rng)] : any(rng); };
  std::uniform_int_distribution<int> prompt_length(0, 64), generated_length(0, 32);
  row->prompt.resize(prompt_length(rng));
  for (int32_t& t : row->prompt) t = pick();
  std::vector<int32_t> pool(8);
  for (int32_t& t : pool) t = pick();
  std::uniform_int_distribution<int> from_pool(0, static_cast<int>(pool.size()) - 1);
  row->generated.resize(generated_length(rng));
  for (int32_t& t : row->generated) t = pool[from_pool(rng)];
}

// The distinct tokens of prompt + generated, with their counts among the generated ones.
std::vector<PenaltyEntry> PenaltyEntries(const RowCase& row) {
  std::map<int32_t, int32_t> counts;
  for (int32_t t : row.prompt) counts.emplace(t, 0);
  for (int32_t t : row.generated) ++counts[t];
  std::vector<PenaltyEntry> entries;
  for (const auto& [token, count] : counts) entries.push_back({token, count});
  return entries;
}

struct GpuResult {
  std::vector<SampledToken> out;
  std::vector<float> logits_after;  // [rows, stride]
};

GpuResult RunOnGpu(int vocab, int64_t stride, const std::vector<RowCase>& rows) {
  const int num_rows = static_cast<int>(rows.size());
  std::vector<float> logits(num_rows * stride, kPadding);
  std::vector<SamplingRowParams> params(num_rows);
  std::vector<PenaltyEntry> penalties;
  for (int r = 0; r < num_rows; ++r) {
    const RowCase& row = rows[r];
    std::copy(row.logits.begin(), row.logits.end(), logits.begin() + r * stride);
    const std::vector<PenaltyEntry> entries = PenaltyEntries(row);
    SamplingRowParams& p = params[r];
    p.temperature = row.params.temperature;
    p.top_k = row.params.top_k;
    p.top_p = row.params.top_p;
    p.min_p = row.params.min_p;
    p.repetition_penalty = row.params.repetition_penalty;
    p.presence_penalty = row.params.presence_penalty;
    p.frequency_penalty = row.params.frequency_penalty;
    p.penalty_begin = static_cast<int32_t>(penalties.size());
    p.penalty_count = static_cast<int32_t>(entries.size());
    p.logprobs = row.logprobs ? 1 : 0;
    p.top_logprobs = row.top_logprobs;
    p.uniform = row.uniform;
    penalties.insert(penalties.end(), entries.begin(), entries.end());
  }
  SampledToken poison;
  std::memset(&poison, 0x7f, sizeof(poison));
  DeviceArray<float> d_logits(logits);
  DeviceArray<SamplingRowParams> d_params(params);
  DeviceArray<PenaltyEntry> d_penalties(penalties);
  DeviceArray<SampledToken> d_out(std::vector<SampledToken>(num_rows, poison));

  TokenSamplingArgs args{};
  args.logits = d_logits.get();
  args.row_stride = stride;
  args.vocab_size = vocab;
  args.num_rows = num_rows;
  args.params = d_params.get();
  args.penalties = d_penalties.get();
  args.out = d_out.get();
  EXPECT_EQ(LaunchTokenSampling(args, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {d_out.Download(), d_logits.Download()};
}

void ExpectLogprobNear(float got, float want, const std::string& what) {
  if (std::isinf(want) || std::isinf(got) || std::isnan(got)) {
    EXPECT_EQ(got, want) << what;
  } else {
    EXPECT_NEAR(got, want, 1e-4) << what;
  }
}

std::string Describe(const RowCase& row, int index) {
  const SamplingParams& p = row.params;
  return "row " + std::to_string(index) + ": T=" + std::to_string(p.temperature) +
         " top_k=" + std::to_string(p.top_k) + " top_p=" + std::to_string(p.top_p) +
         " min_p=" + std::to_string(p.min_p) + " rep=" + std::to_string(p.repetition_penalty) +
         " freq=" + std::to_string(p.frequency_penalty) +
         " pres=" + std::to_string(p.presence_penalty) + " uniform=" + std::to_string(row.uniform);
}

// Checks one launch against the CPU. Log-probabilities, top lists and the logits left in global
// memory must match; returns the number of rows whose token differs (printed).
int CompareWithCpu(int vocab, int64_t stride, const std::vector<RowCase>& rows,
                   const GpuResult& got) {
  int mismatches = 0;
  std::vector<std::pair<int32_t, float>> top;
  for (size_t r = 0; r < rows.size(); ++r) {
    const RowCase& row = rows[r];
    const std::string what = Describe(row, static_cast<int>(r));
    const SampledToken& out = got.out[r];
    absl::StatusOr<Sampler> sampler = Sampler::Create(row.params, vocab);
    EXPECT_TRUE(sampler.ok()) << sampler.status();
    if (!sampler.ok()) continue;

    const int32_t want =
        sampler->SampleWithUniform(row.logits, row.prompt, row.generated, row.uniform);
    EXPECT_GE(out.token, 0) << what;
    EXPECT_LT(out.token, vocab) << what;
    if (out.token < 0 || out.token >= vocab) continue;
    if (out.token != want) {
      ++mismatches;
      std::printf("token mismatch, %s: gpu %d (penalised logit %g), cpu %d (%g)\n", what.c_str(),
                  out.token, static_cast<double>(got.logits_after[r * stride + out.token]), want,
                  static_cast<double>(got.logits_after[r * stride + want]));
    }
    if (row.logprobs || row.top_logprobs > 0) {
      ExpectLogprobNear(out.logprob, TokenLogprob(row.logits, out.token), what + " logprob");
    }

    TopLogprobs(row.logits, row.top_logprobs, &top);
    for (int n = 0; n < kMaxSampledTopLogprobs; ++n) {
      const std::string entry = what + " top " + std::to_string(n);
      if (n < static_cast<int>(top.size())) {
        EXPECT_EQ(out.top_tokens[n], top[n].first) << entry;
        ExpectLogprobNear(out.top_logprobs[n], top[n].second, entry);
      } else {
        EXPECT_EQ(out.top_tokens[n], -1) << entry;
        EXPECT_EQ(out.top_logprobs[n], -kInf) << entry;
      }
    }

    // A row sampled from its shared-memory copy is left as it was; a longer one holds the
    // penalised logits where a penalty applied and the row as it was elsewhere. The padding is
    // untouched either way.
    std::vector<float> expected_after(row.logits.size());
    std::transform(row.logits.begin(), row.logits.end(), expected_after.begin(), Clean);
    if (vocab > kMaxCachedSamplingVocab) {
      sampler->ApplyPenalties(expected_after, row.prompt, row.generated);
    }
    const float* after = got.logits_after.data() + r * stride;
    int wrong = 0;
    for (int i = 0; i < vocab; ++i) wrong += !(Clean(after[i]) == expected_after[i]);
    for (int64_t i = vocab; i < stride; ++i) wrong += after[i] != kPadding;
    EXPECT_EQ(wrong, 0) << what << ": logits left in global memory";
  }
  return mismatches;
}

// Several launches of kRowsPerLaunch rows cycling through the parameter sets; returns the
// number of token mismatches over `total_rows` rows.
int RunAndCompare(int vocab, int64_t stride, LogitKind kind, int launches, uint64_t seed,
                  int* total_rows) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const std::vector<SamplingParams> sets = ParameterSets();
  const int top_counts[] = {0, 1, 5, 20, 3};
  int mismatches = 0;
  *total_rows = 0;
  for (int launch = 0; launch < launches; ++launch) {
    std::vector<RowCase> rows(kRowsPerLaunch);
    for (int r = 0; r < kRowsPerLaunch; ++r) {
      const int index = launch * kRowsPerLaunch + r;
      RowCase& row = rows[r];
      row.logits = RandomLogits(vocab, kind, index, rng);
      row.params = sets[index % sets.size()];
      const bool penalties = row.params.repetition_penalty != 1.0f ||
                             row.params.frequency_penalty != 0.0f ||
                             row.params.presence_penalty != 0.0f;
      if (penalties || index % 5 == 0) RandomHistory(rng, &row);
      row.uniform = row.params.temperature > 0.0f ? uniform(rng) : 0.0;
      row.top_logprobs = top_counts[index % 5];
      row.logprobs = index % 3 != 0;  // some rows skip the log-probabilities
    }
    const GpuResult got = RunOnGpu(vocab, stride, rows);
    mismatches += CompareWithCpu(vocab, stride, rows, got);
    *total_rows += kRowsPerLaunch;
  }
  return mismatches;
}

class TokenSamplingTest : public ::testing::TestWithParam<int> {};  // vocab size

// Continuous random logits: the sums only differ in rounding, which no draw here comes near.
TEST_P(TokenSamplingTest, MatchesTheCpuSamplerOnRandomLogits) {
  SKIP_WITHOUT_GPU();
  const int vocab = GetParam();
  int rows = 0;
  const int mismatches = RunAndCompare(vocab, vocab + 13, LogitKind::kRandom, 4, 42 + vocab, &rows);
  EXPECT_EQ(mismatches, 0) << "of " << rows << " rows";
}

// Logits in steps of 0.5: large groups of equal weights, where the cumulative sums can land
// exactly on a top-p target; the different summation order may then keep one token more or
// less, so a few mismatches (each printed above) are allowed.
TEST_P(TokenSamplingTest, MatchesTheCpuSamplerOnTiedLogits) {
  SKIP_WITHOUT_GPU();
  const int vocab = GetParam();
  int rows = 0;
  const int mismatches =
      RunAndCompare(vocab, vocab + 16, LogitKind::kQuantised, 4, 7 + vocab, &rows);
  EXPECT_LE(mismatches, rows / 100) << "of " << rows << " rows";
}

// 151936 (Qwen3's vocabulary) is above kMaxCachedSamplingVocab: the uncached path.
INSTANTIATE_TEST_SUITE_P(Vocab, TokenSamplingTest, ::testing::Values(50257, 1000, 151936),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "vocab" + std::to_string(info.param);
                         });

TEST(TokenSamplingLaunchTest, NoRowsLaunchesNothing) {
  SKIP_WITHOUT_GPU();
  TokenSamplingArgs args{};  // null buffers: a launch would fault
  args.vocab_size = 1000;
  args.row_stride = 1000;
  args.num_rows = 0;
  EXPECT_EQ(LaunchTokenSampling(args, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// One row drawn 20000 times with uniforms on a regular grid, (i + 0.5) / N: the draw inverts the
// cumulative distribution, so each kept token must come up N * p times give or take one, p being
// its weight over the kept tokens' (computed here from scratch: sort by rank, keep the shortest
// prefix holding top_p of the weight), and no other token may come up at all.
TEST(TokenSamplingStatisticsTest, DrawFrequenciesFollowTheKeptWeights) {
  SKIP_WITHOUT_GPU();
  constexpr int kVocab = 1000;
  constexpr int kDraws = 20000;
  constexpr int kRowsPerBatch = 5000;
  constexpr float kTopP = 0.8f;
  std::mt19937_64 rng(2024);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = normal(rng);

  std::vector<int32_t> order(kVocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const float max_logit = logits[order[0]];
  std::vector<float> weights(kVocab);
  for (int i = 0; i < kVocab; ++i) weights[i] = std::exp((logits[i] - max_logit) / 1.0f);
  double total = 0.0;
  for (int32_t t : order) total += weights[t];
  const double target = static_cast<double>(kTopP) * total;
  std::vector<double> probability(kVocab, 0.0);
  double kept_total = 0.0;
  size_t kept = 0;
  while (kept < order.size() && kept_total < target) kept_total += weights[order[kept++]];
  for (size_t i = 0; i < kept; ++i) probability[order[i]] = weights[order[i]] / kept_total;

  std::vector<int> counts(kVocab, 0);
  for (int first = 0; first < kDraws; first += kRowsPerBatch) {
    std::vector<RowCase> rows(kRowsPerBatch);
    for (int r = 0; r < kRowsPerBatch; ++r) {
      rows[r].logits = logits;
      rows[r].params = Params(1.0f, 0, kTopP);
      rows[r].uniform = (first + r + 0.5) / kDraws;
    }
    const GpuResult got = RunOnGpu(kVocab, kVocab, rows);
    for (const SampledToken& out : got.out) {
      ASSERT_GE(out.token, 0);
      ASSERT_LT(out.token, kVocab);
      ++counts[out.token];
    }
  }
  int outside = 0;
  for (int t = 0; t < kVocab; ++t) {
    if (probability[t] == 0.0) {
      outside += counts[t];
      continue;
    }
    const double expected = kDraws * probability[t];
    EXPECT_NEAR(counts[t], expected, 1.01)
        << "token " << t << " (sigma " << std::sqrt(expected * (1 - probability[t])) << ")";
  }
  EXPECT_EQ(outside, 0) << "draws of tokens outside the top-p set (" << kept << " tokens)";
}

}  // namespace
}  // namespace ridge::cuda
