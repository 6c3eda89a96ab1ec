// Sampling parameters: defaults and boundary values accepted, every invalid field refused with
// kInvalidArgument naming it, both by ValidateSamplingParams and by Sampler::Create.
#include "sampling/sampling_params.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "sampling/sampler.h"

namespace ridge {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

TEST(ValidateSamplingParamsTest, DefaultsAndBoundaryValuesAreValid) {
  const std::vector<std::function<void(SamplingParams&)>> valid = {
      [](SamplingParams&) {},
      [](SamplingParams& p) { p.max_tokens = 1; },
      [](SamplingParams& p) { p.temperature = 0.0f; },
      [](SamplingParams& p) { p.temperature = 2.0f; },
      [](SamplingParams& p) { p.repetition_penalty = 10.0f; },
      [](SamplingParams& p) { p.top_p = 1.0f; },
      [](SamplingParams& p) { p.top_p = 1e-6f; },
      [](SamplingParams& p) { p.top_k = 1; },
      [](SamplingParams& p) { p.top_k = 1 << 30; },  // Above the vocabulary: off.
      [](SamplingParams& p) { p.min_p = 0.0f; },
      [](SamplingParams& p) { p.min_p = 1.0f; },
      [](SamplingParams& p) { p.repetition_penalty = 0.01f; },
      [](SamplingParams& p) { p.presence_penalty = -2.0f; },
      [](SamplingParams& p) { p.presence_penalty = 2.0f; },
      [](SamplingParams& p) { p.frequency_penalty = -2.0f; },
      [](SamplingParams& p) { p.frequency_penalty = 2.0f; },
      [](SamplingParams& p) {
        p.stop_token_ids = {0, 99};
      },
      [](SamplingParams& p) { p.seed = 0; },
  };
  for (size_t i = 0; i < valid.size(); ++i) {
    SamplingParams params;
    valid[i](params);
    EXPECT_TRUE(ValidateSamplingParams(params, 100).ok()) << "case " << i;
    EXPECT_TRUE(Sampler::Create(params, 100).ok()) << "case " << i;
  }
}

struct InvalidCase {
  std::string name;
  std::function<void(SamplingParams&)> mutate;
  std::string expected_in_message;  // The field, and its allowed range where it has one.
};

class InvalidParamsTest : public testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidParamsTest, IsInvalidArgumentNamingTheField) {
  SamplingParams params;
  GetParam().mutate(params);
  const absl::Status status = ValidateSamplingParams(params, 100);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find(GetParam().expected_in_message), std::string::npos) << status;
  EXPECT_EQ(Sampler::Create(params, 100).status(), status);
}

INSTANTIATE_TEST_SUITE_P(
    AllFields, InvalidParamsTest,
    testing::Values(
        InvalidCase{"MaxTokensZero", [](SamplingParams& p) { p.max_tokens = 0; },
                    "max_tokens must be an integer >= 1, got 0"},
        InvalidCase{"MaxTokensNegative", [](SamplingParams& p) { p.max_tokens = -3; },
                    "max_tokens"},
        InvalidCase{"TemperatureNegative", [](SamplingParams& p) { p.temperature = -0.1f; },
                    "temperature must be in [0, 2]"},
        InvalidCase{"TemperatureNan", [](SamplingParams& p) { p.temperature = kNan; },
                    "temperature must be in [0, 2] (0 means greedy), got nan"},
        InvalidCase{"TemperatureAboveTwo", [](SamplingParams& p) { p.temperature = 1e30f; },
                    "temperature must be in [0, 2]"},
        InvalidCase{"RepetitionAboveTen", [](SamplingParams& p) { p.repetition_penalty = 10.5f; },
                    "repetition_penalty must be in (0, 10]"},
        InvalidCase{"TemperatureInf", [](SamplingParams& p) { p.temperature = kInf; },
                    "temperature"},
        InvalidCase{"TopPZero", [](SamplingParams& p) { p.top_p = 0.0f; },
                    "top_p must be in (0, 1]"},
        InvalidCase{"TopPNegative", [](SamplingParams& p) { p.top_p = -0.5f; }, "top_p"},
        InvalidCase{"TopPAboveOne", [](SamplingParams& p) { p.top_p = 1.0001f; }, "top_p"},
        InvalidCase{"TopPNan", [](SamplingParams& p) { p.top_p = kNan; }, "top_p"},
        InvalidCase{"TopKNegative", [](SamplingParams& p) { p.top_k = -1; },
                    "top_k must be an integer >= 0"},
        InvalidCase{"MinPNegative", [](SamplingParams& p) { p.min_p = -0.01f; },
                    "min_p must be in [0, 1]"},
        InvalidCase{"MinPAboveOne", [](SamplingParams& p) { p.min_p = 1.01f; }, "min_p"},
        InvalidCase{"MinPNan", [](SamplingParams& p) { p.min_p = kNan; }, "min_p"},
        InvalidCase{"RepetitionZero", [](SamplingParams& p) { p.repetition_penalty = 0.0f; },
                    "repetition_penalty must be in (0, 10]"},
        InvalidCase{"RepetitionNegative", [](SamplingParams& p) { p.repetition_penalty = -1.0f; },
                    "repetition_penalty"},
        InvalidCase{"RepetitionNan", [](SamplingParams& p) { p.repetition_penalty = kNan; },
                    "repetition_penalty"},
        InvalidCase{"RepetitionInf", [](SamplingParams& p) { p.repetition_penalty = kInf; },
                    "repetition_penalty"},
        InvalidCase{"PresenceBelow", [](SamplingParams& p) { p.presence_penalty = -2.01f; },
                    "presence_penalty must be in [-2, 2]"},
        InvalidCase{"PresenceAbove", [](SamplingParams& p) { p.presence_penalty = 2.01f; },
                    "presence_penalty"},
        InvalidCase{"PresenceNan", [](SamplingParams& p) { p.presence_penalty = kNan; },
                    "presence_penalty"},
        InvalidCase{"PresenceInf", [](SamplingParams& p) { p.presence_penalty = -kInf; },
                    "presence_penalty"},
        InvalidCase{"FrequencyBelow", [](SamplingParams& p) { p.frequency_penalty = -2.5f; },
                    "frequency_penalty must be in [-2, 2]"},
        InvalidCase{"FrequencyAbove", [](SamplingParams& p) { p.frequency_penalty = 3.0f; },
                    "frequency_penalty"},
        InvalidCase{"FrequencyNan", [](SamplingParams& p) { p.frequency_penalty = kNan; },
                    "frequency_penalty"},
        InvalidCase{"StopIdNegative", [](SamplingParams& p) { p.stop_token_ids = {-1}; },
                    "stop_token_ids[0] must be a token id in [0, 100), got -1"},
        InvalidCase{"StopIdAtVocab", [](SamplingParams& p) { p.stop_token_ids = {100}; },
                    "stop_token_ids[0]"},
        InvalidCase{"StopIdLater",
                    [](SamplingParams& p) {
                      p.stop_token_ids = {1, 2, 105};
                    },
                    "stop_token_ids[2] must be a token id in [0, 100), got 105"}),
    [](const testing::TestParamInfo<InvalidCase>& info) { return info.param.name; });

// ---------------------------------------------------------------- greedy

}  // namespace
}  // namespace ridge
