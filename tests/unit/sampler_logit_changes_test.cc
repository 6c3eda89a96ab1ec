// What changes the logits before the sampler chooses: the logit bias, min_tokens holding the end
// tokens off, and the repetition, frequency and presence penalties.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"
#include "tests/unit/sampler_test_support.h"

namespace ridge {
namespace {

using testing::MakeSampler;

TEST(SamplerTest, LogitBiasShiftsTheNamedTokensBeforeEverythingElse) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.logit_bias = {{0, 4.5f}, {1, -100.0f}};
  Sampler sampler = MakeSampler(params, 5);
  EXPECT_FALSE(sampler.IsPlainArgmax(0));  // a backend must not take its own argmax
  // Without the bias 1 wins; banned, 0 (1 + 4.5) beats 3 (4).
  EXPECT_EQ(sampler.Sample(std::vector<float>{1.0f, 5.0f, 3.0f, 4.0f, -2.0f}, {}, {}), 0);
  // At temperature 1 a -100 bias leaves a token all but impossible, +100 all but certain.
  params.temperature = 1.0f;
  params.seed = 3;
  params.logit_bias = {{2, 100.0f}, {4, -100.0f}};
  Sampler hot = MakeSampler(params, 5);
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(hot.Sample(std::vector<float>{1.0f, 5.0f, 3.0f, 4.0f, 20.0f}, {}, {}), 2);
  }
  // Validation names the problem.
  params.logit_bias = {{7, 1.0f}};
  EXPECT_NE(ValidateSamplingParams(params, 5).message().find("outside the vocabulary"),
            std::string::npos);
  params.logit_bias = {{1, 101.0f}};
  EXPECT_NE(ValidateSamplingParams(params, 5).message().find("[-100, 100]"), std::string::npos);
  params.logit_bias = {{1, 1.0f}, {1, 2.0f}};
  EXPECT_NE(ValidateSamplingParams(params, 5).message().find("twice"), std::string::npos);
}

// min_tokens: the end tokens given to Create are not sampled before that many tokens, greedy or
// not, and the sampler asks for the host's logits until then.
TEST(SamplerTest, MinTokensHoldsOffTheEndTokens) {
  SamplingParams p;
  p.max_tokens = 8;
  p.min_tokens = 2;
  p.temperature = 0.0f;
  const std::vector<int32_t> ends = {3, 1};
  auto sampler = Sampler::Create(p, 4, ends);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  const std::vector<float> logits = {0.0f, 5.0f, 1.0f, 9.0f};  // the end tokens lead
  const std::vector<int32_t> none, one = {2}, two = {2, 2};
  EXPECT_EQ(sampler->Sample(logits, none, none), 2);
  EXPECT_EQ(sampler->Sample(logits, none, one), 2);
  EXPECT_EQ(sampler->Sample(logits, none, two), 3);  // min_tokens reached
  EXPECT_TRUE(sampler->NeedsHostLogits(1));
  EXPECT_FALSE(sampler->IsPlainArgmax(1));
  EXPECT_FALSE(sampler->NeedsHostLogits(2));
  EXPECT_TRUE(sampler->IsPlainArgmax(2));
  p.temperature = 1.0f;
  p.seed = 3;
  auto drawing = Sampler::Create(p, 4, ends);
  ASSERT_TRUE(drawing.ok());
  for (int i = 0; i < 200; ++i) {
    const int32_t token = drawing->Sample(logits, none, one);
    EXPECT_TRUE(token == 0 || token == 2) << token;
  }
  // Without end tokens (ignore_eos and no stop ids) there is nothing to hold off.
  auto no_ends = Sampler::Create(p, 4);
  ASSERT_TRUE(no_ends.ok());
  EXPECT_FALSE(no_ends->HoldsEndTokens(0));
  // Out of range: negative, above max_tokens, or with a JSON constraint (checked in its test).
  p.min_tokens = -1;
  EXPECT_NE(Sampler::Create(p, 4, ends).status().message().find("min_tokens"), std::string::npos);
  p.min_tokens = 9;
  EXPECT_NE(Sampler::Create(p, 4, ends)
                .status()
                .message()
                .find("min_tokens must be in [0, "
                      "max_tokens = 8], got 9"),
            std::string::npos);
}

// ---------------------------------------------------------------- penalties

TEST(PenaltiesTest, RepetitionPenaltyDividesPositiveMultipliesNegativeOncePerToken) {
  SamplingParams params;
  params.repetition_penalty = 1.3f;
  Sampler sampler = MakeSampler(params, 6);
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, -0.5f, 3.0f, 0.0f};
  const std::vector<int32_t> prompt = {0, 1, 1, 5};
  const std::vector<int32_t> generated = {2, 3, 2, 0};
  sampler.ApplyPenalties(logits, prompt, generated);
  EXPECT_FLOAT_EQ(logits[0], 2.0f / 1.3f);  // In prompt and generated: still once.
  EXPECT_FLOAT_EQ(logits[1], -1.0f * 1.3f);
  EXPECT_FLOAT_EQ(logits[2], 0.5f / 1.3f);
  EXPECT_FLOAT_EQ(logits[3], -0.5f * 1.3f);
  EXPECT_FLOAT_EQ(logits[4], 3.0f);  // Never seen.
  EXPECT_FLOAT_EQ(logits[5], 0.0f);  // Zero stays zero.
}

TEST(PenaltiesTest, FrequencyAndPresenceCountGeneratedTokensOnly) {
  SamplingParams params;
  params.frequency_penalty = 0.4f;
  params.presence_penalty = -0.25f;
  Sampler sampler = MakeSampler(params, 5);
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, -0.5f, 3.0f};
  sampler.ApplyPenalties(logits, /*prompt_tokens=*/std::vector<int32_t>{0, 0, 4},
                         /*generated_tokens=*/std::vector<int32_t>{2, 3, 2, 2});
  EXPECT_FLOAT_EQ(logits[0], 2.0f);
  EXPECT_FLOAT_EQ(logits[1], -1.0f);
  EXPECT_FLOAT_EQ(logits[2], 0.5f - (0.4f * 3 - 0.25f));
  EXPECT_FLOAT_EQ(logits[3], -0.5f - (0.4f * 1 - 0.25f));
  EXPECT_FLOAT_EQ(logits[4], 3.0f);
}

TEST(PenaltiesTest, RepetitionComesBeforeFrequencyAndPresence) {
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 1.0f;
  Sampler sampler = MakeSampler(params, 3);
  std::vector<float> logits = {4.0f, -4.0f, 1.0f};
  sampler.ApplyPenalties(logits, std::vector<int32_t>{1}, std::vector<int32_t>{0, 0});
  EXPECT_FLOAT_EQ(logits[0], 4.0f / 2.0f - (0.5f * 2 + 1.0f));  // 0, not 4 - 2 = 2 then / 2.
  EXPECT_FLOAT_EQ(logits[1], -8.0f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f);
}

TEST(PenaltiesTest, ScratchIsClearedBetweenCalls) {
  SamplingParams params;
  params.repetition_penalty = 1.5f;
  params.frequency_penalty = 1.0f;
  params.presence_penalty = 1.0f;
  Sampler sampler = MakeSampler(params, 4);
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  sampler.ApplyPenalties(logits, std::vector<int32_t>{0}, std::vector<int32_t>{1, 1, 2});
  std::vector<float> fresh = {1.0f, 1.0f, 1.0f, 1.0f};
  sampler.ApplyPenalties(fresh, {}, {});
  EXPECT_EQ(fresh, std::vector<float>({1.0f, 1.0f, 1.0f, 1.0f}));
  sampler.ApplyPenalties(fresh, {}, std::vector<int32_t>{1});
  EXPECT_FLOAT_EQ(fresh[1], 1.0f / 1.5f - 2.0f);  // Count 1, not 3: nothing left over.
}

TEST(PenaltiesTest, SampleAppliesPenaltiesBeforeChoosing) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 1.2f;
  Sampler repetition = MakeSampler(params, 2);
  const std::vector<float> logits = {1.0f, 0.9f};
  EXPECT_EQ(repetition.Sample(logits, {}, {}), 0);
  EXPECT_EQ(repetition.Sample(logits, std::vector<int32_t>{0}, {}), 1);  // 1 / 1.2 < 0.9.

  params.repetition_penalty = 1.0f;
  params.presence_penalty = 0.2f;
  Sampler presence = MakeSampler(params, 2);
  EXPECT_EQ(presence.Sample(logits, std::vector<int32_t>{0}, {}), 0);  // Prompt: no effect.
  EXPECT_EQ(presence.Sample(logits, {}, std::vector<int32_t>{0}), 1);
}

}  // namespace
}  // namespace ridge
