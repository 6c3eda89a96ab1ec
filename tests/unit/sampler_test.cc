#include "sampling/sampler.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "sampling/sampling_params.h"
#include "tests/unit/sampler_test_support.h"

// Counts every allocation in this binary, so that a test can prove Sample() makes none. GCC 12
// takes the free() in the replaced operator delete for a mismatch once it is inlined.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace ridge {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

using testing::MakeSampler;

SamplingParams Seeded(uint64_t seed) {
  SamplingParams params;
  params.seed = seed;
  return params;
}

std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> probs(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    probs[i] = std::exp((logits[i] - max) / temperature);
    sum += probs[i];
  }
  for (double& p : probs) p /= sum;
  return probs;
}

// Logits whose softmax (at temperature 1) is exactly proportional to `probs`.
std::vector<float> LogitsFor(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(p > 0 ? static_cast<float>(std::log(p)) : -kInf);
  return logits;
}

std::vector<float> RandomLogits(int32_t vocab_size, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(vocab_size);
  for (float& logit : logits) logit = normal(rng);
  return logits;
}

std::vector<int64_t> Histogram(Sampler& sampler, const std::vector<float>& logits, int draws) {
  std::vector<int64_t> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) ++counts[sampler.Sample(logits, {}, {})];
  return counts;
}

// Each count within 5 standard deviations of its binomial mean; impossible tokens never drawn.
void ExpectMatchesDistribution(const std::vector<int64_t>& counts, const std::vector<double>& probs,
                               int draws) {
  ASSERT_EQ(counts.size(), probs.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    const double mean = draws * probs[i];
    if (probs[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " must never be drawn";
    } else {
      const double sigma = std::sqrt(mean * (1.0 - probs[i]));
      EXPECT_NEAR(static_cast<double>(counts[i]), mean, 5.0 * sigma + 1.0) << "token " << i;
    }
  }
}

// `probs` restricted to `kept` and renormalised.
std::vector<double> Restrict(const std::vector<double>& probs, const std::set<int32_t>& kept) {
  std::vector<double> restricted(probs.size(), 0.0);
  double sum = 0.0;
  for (int32_t t : kept) sum += probs[t];
  for (int32_t t : kept) restricted[t] = probs[t] / sum;
  return restricted;
}

// ---------------------------------------------------------------- parameter validation

TEST(SamplerTest, GreedyPicksArgmaxAndLowestIdOnTies) {
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler = MakeSampler(params, 5);
  EXPECT_EQ(sampler.Sample(std::vector<float>{1.0f, 5.0f, 3.0f, 4.0f, -2.0f}, {}, {}), 1);
  EXPECT_EQ(sampler.Sample(std::vector<float>{1.0f, 5.0f, 3.0f, 5.0f, -2.0f}, {}, {}), 1);
  EXPECT_EQ(sampler.Sample(std::vector<float>{-9.0f, -8.0f, -7.0f, -6.0f, -5.0f}, {}, {}), 4);

  Sampler large = MakeSampler(params, 5000);
  for (uint32_t trial = 0; trial < 20; ++trial) {
    const std::vector<float> logits = RandomLogits(5000, 2.0f, trial);
    const int32_t expected = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(large.Sample(logits, {}, {}), expected);
  }
}

TEST(SamplerTest, TopKOneEqualsGreedy) {
  SamplingParams greedy_params;
  greedy_params.temperature = 0.0f;
  Sampler greedy = MakeSampler(greedy_params, 1000);
  SamplingParams top1_params = Seeded(7);
  top1_params.top_k = 1;
  top1_params.temperature = 1.5f;
  Sampler top1 = MakeSampler(top1_params, 1000);
  for (uint32_t trial = 0; trial < 50; ++trial) {
    std::vector<float> logits = RandomLogits(1000, 1.0f, trial);
    if (trial % 5 == 0) logits[900] = logits[17] = 10.0f;  // A tie at the top.
    EXPECT_EQ(top1.Sample(logits, {}, {}), greedy.Sample(logits, {}, {})) << "trial " << trial;
  }
}

// ---------------------------------------------------------------- seeds

TEST(SamplerTest, SameSeedGivesSameSequenceAndDifferentSeedsDiffer) {
  const std::vector<float> logits = RandomLogits(50, 1.0f, 1);
  SamplingParams params = Seeded(42);
  params.top_k = 30;
  params.top_p = 0.95f;
  params.min_p = 0.01f;
  params.repetition_penalty = 1.1f;
  params.frequency_penalty = 0.2f;
  auto run = [&](const SamplingParams& p) {
    Sampler sampler = MakeSampler(p, 50);
    std::vector<int32_t> generated;
    for (int i = 0; i < 200; ++i) generated.push_back(sampler.Sample(logits, {}, generated));
    return generated;
  };
  const std::vector<int32_t> first = run(params);
  EXPECT_EQ(run(params), first);

  SamplingParams other = params;
  other.seed = 43;
  const std::vector<int32_t> second = run(other);
  int differences = 0;
  for (size_t i = 0; i < first.size(); ++i) differences += first[i] != second[i];
  EXPECT_GT(differences, 100);

  SamplingParams unseeded = params;
  unseeded.seed.reset();
  EXPECT_NE(run(unseeded), run(unseeded));
}

// ---------------------------------------------------------------- distribution

TEST(SamplerTest, FrequenciesMatchSoftmaxAtTemperatureOne) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f};
  Sampler sampler = MakeSampler(Seeded(1), 6);
  constexpr int kDraws = 200000;
  ExpectMatchesDistribution(Histogram(sampler, logits, kDraws), Softmax(logits, 1.0), kDraws);
}

TEST(SamplerTest, LowerTemperatureSharpens) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f};
  constexpr int kDraws = 200000;
  SamplingParams cold_params = Seeded(2);
  cold_params.temperature = 0.5f;
  Sampler cold = MakeSampler(cold_params, 6);
  const std::vector<int64_t> cold_counts = Histogram(cold, logits, kDraws);
  ExpectMatchesDistribution(cold_counts, Softmax(logits, 0.5), kDraws);

  Sampler warm = MakeSampler(Seeded(2), 6);
  const std::vector<int64_t> warm_counts = Histogram(warm, logits, kDraws);
  EXPECT_GT(cold_counts[0], warm_counts[0] + 20000);  // 0.83 vs 0.57 of the draws.
  EXPECT_LT(cold_counts[4], warm_counts[4]);
}

TEST(SamplerTest, ExtremeTemperaturesStayWellDefined) {
  const std::vector<float> logits = {1.0f, 1.0001f, 0.5f, -3e38f};
  SamplingParams tiny = Seeded(3);
  tiny.temperature = 1e-30f;
  Sampler cold = MakeSampler(tiny, 4);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(cold.Sample(logits, {}, {}), 1);

  // The hottest a request may ask for (kMaxTemperature) over logits a million times larger than
  // their differences: as flat as the logits say.
  SamplingParams hot_params = Seeded(3);
  hot_params.temperature = kMaxTemperature;
  Sampler hot = MakeSampler(hot_params, 3);
  constexpr int kDraws = 30000;
  ExpectMatchesDistribution(Histogram(hot, {1e6f, 1e6f + 0.5f, 1e6f + 1.0f}, kDraws),
                            {0.2543, 0.3265, 0.4192}, kDraws);
}

// ---------------------------------------------------------------- filters

// Token i has probability kProbs[i]; by rank: 1 (0.40), 3 (0.30), 4 (0.15), 2 (0.10), 0 (0.05).
const std::vector<double> kProbs = {0.05, 0.40, 0.10, 0.30, 0.15};

struct FilterCase {
  std::string name;
  int32_t top_k;
  float top_p;
  float min_p;
  std::set<int32_t> kept;
};

class FilterTest : public ::testing::TestWithParam<FilterCase> {};

TEST_P(FilterTest, DrawsExactlyTheKeptSetWithRenormalisedFrequencies) {
  SamplingParams params = Seeded(11);
  params.top_k = GetParam().top_k;
  params.top_p = GetParam().top_p;
  params.min_p = GetParam().min_p;
  Sampler sampler = MakeSampler(params, 5);
  constexpr int kDraws = 50000;
  const std::vector<int64_t> counts = Histogram(sampler, LogitsFor(kProbs), kDraws);
  ExpectMatchesDistribution(counts, Restrict(kProbs, GetParam().kept), kDraws);
}

INSTANTIATE_TEST_SUITE_P(
    HandComputedSets, FilterTest,
    ::testing::Values(
        FilterCase{"TopK1", 1, 1.0f, 0.0f, {1}}, FilterCase{"TopK3", 3, 1.0f, 0.0f, {1, 3, 4}},
        FilterCase{"TopKAboveVocabIsOff", 7, 1.0f, 0.0f, {0, 1, 2, 3, 4}},
        FilterCase{"TopP035", 0, 0.35f, 0.0f, {1}}, FilterCase{"TopP06", 0, 0.6f, 0.0f, {1, 3}},
        FilterCase{"TopP08", 0, 0.8f, 0.0f, {1, 3, 4}},
        FilterCase{"TopP09", 0, 0.9f, 0.0f, {1, 3, 4, 2}},
        FilterCase{"MinP05", 0, 1.0f, 0.5f, {1, 3}}, FilterCase{"MinP03", 0, 1.0f, 0.3f, {1, 3, 4}},
        FilterCase{"MinP1", 0, 1.0f, 1.0f, {1}},
        // top-p measures mass after top-k renormalises: 0.40/0.85, 0.70/0.85 =
        // 0.82 >= 0.75 keeps two; on the raw probabilities it would keep three.
        FilterCase{"TopK3ThenTopP075", 3, 0.75f, 0.0f, {1, 3}},
        FilterCase{"TopPThenMinP", 0, 0.9f, 0.3f, {1, 3, 4}},
        FilterCase{"AllThree", 4, 0.9f, 0.5f, {1, 3}}),
    [](const ::testing::TestParamInfo<FilterCase>& info) { return info.param.name; });

// Probabilities within a few percent of each other, so that top-p's weight buckets hold several
// tokens and the nucleus boundary falls inside one. By rank: 1, 2, 3, 0, 4; cumulative 0.205,
// 0.4075, 0.609, 0.809, 1.
TEST(SamplerTest, TopPBoundaryInsideOneWeightBucket) {
  const std::vector<double> probs = {0.2, 0.205, 0.2025, 0.2015, 0.191};
  const std::vector<std::pair<float, std::set<int32_t>>> cases = {
      {0.3f, {1, 2}}, {0.5f, {1, 2, 3}}, {0.7f, {1, 2, 3, 0}}};
  for (const auto& [top_p, kept] : cases) {
    SamplingParams params = Seeded(12);
    params.top_p = top_p;
    Sampler sampler = MakeSampler(params, 5);
    constexpr int kDraws = 20000;
    ExpectMatchesDistribution(Histogram(sampler, LogitsFor(probs), kDraws), Restrict(probs, kept),
                              kDraws);
  }
}

// The nucleus of a large vocabulary, computed by a full sort: the sampler's doubling search
// must never draw outside it.
TEST(SamplerTest, TopPAndTopKOnLargeVocabularyStayInsideBruteForceSets) {
  constexpr int32_t kVocab = 50000;
  const std::vector<float> logits = RandomLogits(kVocab, 2.5f, 5);
  const std::vector<double> probs = Softmax(logits, 1.0);
  std::vector<int32_t> order(kVocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });

  std::set<int32_t> nucleus;
  double mass = 0.0;
  for (int32_t t : order) {
    nucleus.insert(t);
    mass += probs[t];
    if (mass >= 0.9) break;
  }
  ASSERT_GT(nucleus.size(), 64u) << "the test should exercise the search beyond its first step";
  SamplingParams params = Seeded(9);
  params.top_p = 0.9f;
  Sampler sampler = MakeSampler(params, kVocab);
  for (int i = 0; i < 300; ++i) EXPECT_TRUE(nucleus.count(sampler.Sample(logits, {}, {})));

  // Both top-k strategies: a heap for small k, nth_element for large k.
  for (int32_t k : {200, 3000}) {
    const std::set<int32_t> best(order.begin(), order.begin() + k);
    params.top_p = 1.0f;
    params.top_k = k;
    Sampler top_k = MakeSampler(params, kVocab);
    std::set<int32_t> seen;
    for (int i = 0; i < 500; ++i) seen.insert(top_k.Sample(logits, {}, {}));
    EXPECT_TRUE(std::includes(best.begin(), best.end(), seen.begin(), seen.end())) << "k=" << k;
    EXPECT_GT(seen.size(), 20u);
  }
}

TEST(SamplerTest, EqualLogitsAreRankedByLowerId) {
  const std::vector<float> logits(10, 0.25f);
  SamplingParams params = Seeded(10);
  params.top_p = 0.5f;  // Exactly five of the ten equal tokens: the five lowest ids.
  Sampler nucleus = MakeSampler(params, 10);
  constexpr int kDraws = 20000;
  std::vector<double> half(10, 0.0);
  std::fill(half.begin(), half.begin() + 5, 0.2);
  ExpectMatchesDistribution(Histogram(nucleus, logits, kDraws), half, kDraws);

  params.top_p = 1.0f;
  params.top_k = 3;
  Sampler top_k = MakeSampler(params, 10);
  std::vector<double> three(10, 0.0);
  std::fill(three.begin(), three.begin() + 3, 1.0 / 3);
  ExpectMatchesDistribution(Histogram(top_k, logits, kDraws), three, kDraws);
}

// ---------------------------------------------------------------- non-finite logits

TEST(NonFiniteLogitsTest, NanIsNeverChosen) {
  const std::vector<float> logits = {kNan, 0.0f, kNan, 0.5f, -kInf};
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(MakeSampler(greedy, 5).Sample(logits, {}, {}), 3);

  SamplingParams params = Seeded(4);
  params.repetition_penalty = 1.5f;
  params.frequency_penalty = 0.5f;
  Sampler sampler = MakeSampler(params, 5);
  constexpr int kDraws = 20000;
  std::vector<int64_t> counts(5, 0);
  for (int i = 0; i < kDraws; ++i) ++counts[sampler.Sample(logits, {}, std::vector<int32_t>{0})];
  ExpectMatchesDistribution(
      counts, {0.0, 1 / (1 + std::exp(0.5)), 0.0, std::exp(0.5) / (1 + std::exp(0.5)), 0.0},
      kDraws);
}

TEST(NonFiniteLogitsTest, PositiveInfinityTokensShareAllTheMass) {
  const std::vector<float> logits = {0.0f, kInf, 3.0f, kInf, kNan};
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(MakeSampler(greedy, 5).Sample(logits, {}, {}), 1);

  SamplingParams params = Seeded(5);
  params.top_p = 0.4f;  // Half of the mass is one +inf token: the nucleus is that token.
  Sampler nucleus = MakeSampler(params, 5);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(nucleus.Sample(logits, {}, {}), 1);

  Sampler sampler = MakeSampler(Seeded(5), 5);
  constexpr int kDraws = 20000;
  ExpectMatchesDistribution(Histogram(sampler, logits, kDraws), {0.0, 0.5, 0.0, 0.5, 0.0}, kDraws);
}

TEST(NonFiniteLogitsTest, NoUsableLogitFallsBackToTokenZero) {
  const std::vector<float> logits = {kNan, -kInf, kNan};
  SamplingParams params = Seeded(6);
  params.top_k = 2;
  params.top_p = 0.5f;
  params.min_p = 0.5f;
  EXPECT_EQ(MakeSampler(params, 3).Sample(logits, {}, {}), 0);
  params.temperature = 0.0f;
  EXPECT_EQ(MakeSampler(params, 3).Sample(logits, {}, {}), 0);
}

TEST(NonFiniteLogitsTest, HugeFiniteLogitsDoNotOverflow) {
  SamplingParams params = Seeded(7);
  params.temperature = 0.01f;
  params.top_p = 0.99f;
  Sampler sampler = MakeSampler(params, 3);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(sampler.Sample(std::vector<float>{-3e38f, 3e38f, 2.9e38f}, {}, {}), 1);
  }
}

// ---------------------------------------------------------------- logprobs

TEST(LogprobsTest, TopLogprobsAreLogSoftmaxOfRawLogitsInRankOrder) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, kNan, -1.0f};
  const double log_sum =
      std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0) + std::exp(-1.0));
  std::vector<std::pair<int32_t, float>> top;
  TopLogprobs(logits, 3, &top);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 1);
  EXPECT_EQ(top[1].first, 3);
  EXPECT_EQ(top[2].first, 2);
  EXPECT_NEAR(top[0].second, 3.0 - log_sum, 1e-6);
  EXPECT_NEAR(top[1].second, 3.0 - log_sum, 1e-6);
  EXPECT_NEAR(top[2].second, 2.0 - log_sum, 1e-6);
  for (const auto& [token, logprob] : top) EXPECT_EQ(TokenLogprob(logits, token), logprob);

  TopLogprobs(logits, 100, &top);  // More than the vocabulary: all of it, NaN last.
  ASSERT_EQ(top.size(), logits.size());
  EXPECT_EQ(top.back().first, 4);
  EXPECT_EQ(top.back().second, -kInf);
  double total = 0.0;
  for (const auto& entry : top) total += std::exp(entry.second);
  EXPECT_NEAR(total, 1.0, 1e-6);

  TopLogprobs(logits, 0, &top);
  EXPECT_TRUE(top.empty());
}

TEST(LogprobsTest, StableForLargeAndNonFiniteLogits) {
  EXPECT_NEAR(TokenLogprob(std::vector<float>{1000.0f, 999.0f}, 0), -std::log1p(std::exp(-1.0)),
              1e-6);
  const std::vector<float> with_inf = {0.0f, kInf, kInf};
  EXPECT_NEAR(TokenLogprob(with_inf, 1), -std::log(2.0), 1e-6);
  EXPECT_EQ(TokenLogprob(with_inf, 0), -kInf);
  EXPECT_EQ(TokenLogprob(std::vector<float>{kNan, kNan}, 1), -kInf);
}

// ---------------------------------------------------------------- allocation

TEST(SamplerTest, SampleAndTopLogprobsDoNotAllocateAfterTheFirstCall) {
  constexpr int32_t kVocab = 4000;
  SamplingParams params = Seeded(8);
  params.top_p = 0.9f;
  params.min_p = 0.01f;
  params.repetition_penalty = 1.1f;
  params.presence_penalty = 0.5f;
  params.frequency_penalty = 0.5f;
  std::vector<Sampler> samplers;
  samplers.reserve(4);
  const int64_t before_create = g_allocations.load();
  for (int32_t top_k : {0, 500, 2000}) {  // top-p alone, top-k by heap, top-k by nth_element.
    params.top_k = top_k;
    samplers.push_back(MakeSampler(params, kVocab));
  }
  params.temperature = 0.0f;
  samplers.push_back(MakeSampler(params, kVocab));
  // No scratch yet: a sequence sampled on a GPU never allocates it.
  EXPECT_EQ(g_allocations.load() - before_create, 0);

  const std::vector<float> logits = RandomLogits(kVocab, 1.0f, 3);
  const std::vector<int32_t> prompt = {1, 2, 3, 3, 3999};
  std::vector<int32_t> generated;
  generated.reserve(512);
  std::vector<std::pair<int32_t, float>> top;
  top.reserve(20);

  const int64_t before_first = g_allocations.load();
  for (Sampler& sampler : samplers) generated.push_back(sampler.Sample(logits, prompt, generated));
  ASSERT_GT(g_allocations.load(), before_first) << "the allocation counter does not count";
  const int64_t before = g_allocations.load();
  for (int i = 0; i < 100; ++i) {
    for (Sampler& sampler : samplers)
      generated.push_back(sampler.Sample(logits, prompt, generated));
    TopLogprobs(logits, 20, &top);
  }
  EXPECT_EQ(g_allocations.load() - before, 0);
}

}  // namespace
}  // namespace ridge
