// Prompt logprobs (EngineRequest::prompt_logprobs) against reference logits: the engine scores
// each prompt token after the first with the model's log-softmax at the position before it,
// which must match the log-softmax of the logits recorded from flash-linear-attention (MesaNet,
// tests/data/mesanet) and from the float64 reference of the GKA hybrid spec
// (tests/data/hybrid_qwen3), while the prompt runs in several prefill pieces beside another
// request's decoding, and again when the prefix cache holds the prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "models/arch/load_model.h"
#include "models/checkpoint.h"
#include "tests/support/collecting_sink.h"
#include "tests/support/logit_agreement.h"

namespace ridge {
namespace {

using namespace std::chrono_literals;
using testing::CollectingSink;
using testing::ReadFloats;

const std::filesystem::path kDataDir = RIDGE_TEST_DATA_DIR;

struct GoldenCase {
  std::string name;  // under tests/data
  std::string logits_file;
  double max_logprob_error;  // the largest |logprob - reference| over the prompt
  double min_same_rank;      // rows whose rank is the reference's
};

// The reference's log-softmax at row `row` of [rows, vocab] logits.
std::vector<double> LogSoftmax(const std::vector<float>& logits, int64_t row, int64_t vocab) {
  const float* x = logits.data() + row * vocab;
  const double max = *std::max_element(x, x + vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(x[i] - max);
  std::vector<double> out(vocab);
  for (int64_t i = 0; i < vocab; ++i) out[i] = x[i] - max - std::log(sum);
  return out;
}

EngineRequest Scoring(std::vector<int32_t> prompt, int32_t top) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.sampling.max_tokens = 1;
  r.sampling.temperature = 0.0f;
  r.sampling.ignore_eos = true;
  r.prompt_logprobs = top;
  return r;
}

class PromptLogprobsGoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(PromptLogprobsGoldenTest, MatchTheReferenceLogSoftmax) {
  const GoldenCase& c = GetParam();
  const auto dir = kDataDir / c.name;
  auto model = LoadModel(dir, LoadFormat::kCheckpoint);
  ASSERT_TRUE(model.ok()) << model.status();
  auto golden = ReadJsonFile(dir / "golden.json");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const std::vector<int32_t> ids = (*golden)["ids"].get<std::vector<int32_t>>();
  const int64_t vocab = (*model)->spec().vocab_size;
  const std::vector<float> reference = ReadFloats(dir / c.logits_file);
  ASSERT_EQ(reference.size(), ids.size() * vocab);

  // Pieces of 7 prompt tokens a step, beside a request that decodes; the references run the
  // config's fixed iteration count.
  EngineOptions options{.max_slots = 2, .prefix_cache_slots = 4, .prefill_token_budget = 7};
  options.default_solver = {0.0f, DefaultSolverIterations((*model)->spec())};
  auto engine = Engine::Create(model->get(), options, nullptr);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EngineRequest other = Scoring({ids[3], ids[2], ids[1]}, -1);
  other.sampling.max_tokens = 40;
  auto other_sink = std::make_shared<CollectingSink>();
  ASSERT_TRUE((*engine)->Submit(std::move(other), other_sink).ok());
  constexpr int32_t kTop = 3;
  auto sink = std::make_shared<CollectingSink>();
  ASSERT_TRUE((*engine)->Submit(Scoring(ids, kTop), sink).ok());
  const RequestEvent last = sink->Wait();
  ASSERT_TRUE(last.status.ok()) << last.status;
  other_sink->Wait();

  const std::vector<LogprobEntry> got = sink->prompt_logprobs();
  ASSERT_EQ(got.size(), ids.size() - 1);
  double max_error = 0;
  int64_t same_best = 0, same_rank = 0;
  for (size_t t = 0; t + 1 < ids.size(); ++t) {
    const LogprobEntry& e = got[t];
    const std::vector<double> want = LogSoftmax(reference, static_cast<int64_t>(t), vocab);
    ASSERT_EQ(e.token, ids[t + 1]) << "position " << t + 1;
    max_error = std::max(max_error, std::abs(e.logprob - want[e.token]));
    ASSERT_EQ(e.top.size(), static_cast<size_t>(kTop));
    for (size_t k = 1; k < e.top.size(); ++k) EXPECT_GE(e.top[k - 1].second, e.top[k].second);
    const int32_t best =
        static_cast<int32_t>(std::max_element(want.begin(), want.end()) - want.begin());
    same_best += e.top[0].first == best;
    const int64_t rank =
        std::count_if(want.begin(), want.end(), [&](double x) { return x >= want[e.token]; });
    same_rank += e.rank == rank;
    // The rank counts the token itself: the most likely token ranks 1.
    EXPECT_GE(e.rank, 1);
    if (e.top[0].first == e.token) {
      EXPECT_EQ(e.rank, 1);
    }
  }
  const double rows = static_cast<double>(ids.size() - 1);
  std::printf(
      "%s: %zu prompt logprobs, largest error %.3e, best token agrees %.1f%%, rank %.1f%%\n",
      c.name.c_str(), got.size(), max_error, 100 * same_best / rows, 100 * same_rank / rows);
  EXPECT_LT(max_error, c.max_logprob_error);
  EXPECT_GE(same_best / rows, 0.98);
  EXPECT_GE(same_rank / rows, c.min_same_rank);
  EXPECT_EQ(last.usage.cached_tokens, 0);

  // The prompt's state is in the prefix cache now, so a longer prompt that begins with it could
  // start there: one that is scored is computed from its start all the same, and gets the same
  // logprobs; one that is not uses the cache (so the cache did hold it).
  std::vector<int32_t> longer = ids;
  longer.push_back(ids[1]);
  auto again = std::make_shared<CollectingSink>();
  ASSERT_TRUE((*engine)->Submit(Scoring(longer, kTop), again).ok());
  EXPECT_EQ(again->Wait().usage.cached_tokens, 0);
  const std::vector<LogprobEntry> repeated = again->prompt_logprobs();
  ASSERT_EQ(repeated.size(), got.size() + 1);
  for (size_t t = 0; t < got.size(); ++t) {
    EXPECT_NEAR(repeated[t].logprob, got[t].logprob, 1e-4) << "position " << t + 1;
  }
  auto cached = std::make_shared<CollectingSink>();
  ASSERT_TRUE((*engine)->Submit(Scoring(longer, -1), cached).ok());
  EXPECT_EQ(cached->Wait().usage.cached_tokens, static_cast<int64_t>(ids.size()));
  EXPECT_TRUE(cached->prompt_logprobs().empty());
}

INSTANTIATE_TEST_SUITE_P(
    References, PromptLogprobsGoldenTest,
    // Measured: largest errors 1.14e-2 (FLA keeps q and k in fp16; its logits differ from an
    // fp32 engine by 1.3e-3 relative RMS, so near-ties rank differently: 87% equal ranks) and
    // 5.8e-5 (the float64 reference; every rank equal).
    ::testing::Values(GoldenCase{"mesanet/d64_untied", "logits_prefill.f32", 2e-2, 0.8},
                      GoldenCase{"hybrid_qwen3/gka_swa_mix", "logits.f32", 1.5e-4, 0.99}),
    [](const auto& info) {
      std::string name = info.param.name;
      std::replace(name.begin(), name.end(), '/', '_');
      return name;
    });

}  // namespace
}  // namespace ridge
