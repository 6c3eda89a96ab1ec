#include "sampling/sampling_params.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/check.h"
#include "sampling/json_constraint.h"

namespace ridge {
namespace {

// absl::string_view, not std::string_view: Debian's abseil keeps its own string_view type, and
// StrCat accepts only that one.
template <typename T>
absl::Status OutOfRange(absl::string_view field, absl::string_view allowed, T value) {
  return absl::InvalidArgumentError(
      absl::StrCat("sampling parameter ", field, " must be ", allowed, ", got ", value));
}

// Every range test below is written so that NaN fails it: comparisons with NaN are false.
bool InClosedRange(float value, float low, float high) { return value >= low && value <= high; }

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& params, int32_t vocab_size) {
  RIDGE_CHECK(vocab_size > 0);
  if (params.max_tokens < 1) {
    return OutOfRange("max_tokens", "an integer >= 1", params.max_tokens);
  }
  if (params.min_tokens < 0 || params.min_tokens > params.max_tokens) {
    return OutOfRange("min_tokens", absl::StrCat("in [0, max_tokens = ", params.max_tokens, "]"),
                      params.min_tokens);
  }
  if (params.min_tokens > 0 && params.json_output != nullptr) {
    return absl::InvalidArgumentError(
        "sampling parameter min_tokens cannot be combined with a JSON constraint (response_format "
        "or a constraining tool_choice): the constrained output must be able to end");
  }
  if (!InClosedRange(params.temperature, 0.0f, kMaxTemperature)) {
    return OutOfRange("temperature", absl::StrCat("in [0, ", kMaxTemperature, "] (0 means greedy)"),
                      params.temperature);
  }
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    return OutOfRange("top_p", "in (0, 1] (1 turns it off)", params.top_p);
  }
  if (params.top_k < 0) {
    return OutOfRange("top_k", "an integer >= 0 (0 or a value >= the vocabulary size turns it off)",
                      params.top_k);
  }
  if (!InClosedRange(params.min_p, 0.0f, 1.0f)) {
    return OutOfRange("min_p", "in [0, 1] (0 turns it off)", params.min_p);
  }
  if (!(params.repetition_penalty > 0.0f && params.repetition_penalty <= kMaxRepetitionPenalty)) {
    return OutOfRange("repetition_penalty",
                      absl::StrCat("in (0, ", kMaxRepetitionPenalty, "] (1 turns it off)"),
                      params.repetition_penalty);
  }
  if (!InClosedRange(params.presence_penalty, -2.0f, 2.0f)) {
    return OutOfRange("presence_penalty", "in [-2, 2] (0 turns it off)", params.presence_penalty);
  }
  if (!InClosedRange(params.frequency_penalty, -2.0f, 2.0f)) {
    return OutOfRange("frequency_penalty", "in [-2, 2] (0 turns it off)", params.frequency_penalty);
  }
  if (params.logit_bias.size() > kMaxLogitBiasEntries) {
    return absl::InvalidArgumentError(absl::StrCat("logit_bias: ", params.logit_bias.size(),
                                                   " entries; at most ", kMaxLogitBiasEntries));
  }
  std::vector<int32_t> biased;
  for (const auto& [token, bias] : params.logit_bias) {
    if (token < 0 || token >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "logit_bias: token id ", token, " is outside the vocabulary [0, ", vocab_size, ")"));
    }
    if (!InClosedRange(bias, -100.0f, 100.0f)) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias: the bias of token ", token,
                                                     " must be in [-100, 100], got ", bias));
    }
    biased.push_back(token);
  }
  std::sort(biased.begin(), biased.end());
  if (std::adjacent_find(biased.begin(), biased.end()) != biased.end()) {
    return absl::InvalidArgumentError("logit_bias: a token id appears twice");
  }
  for (size_t i = 0; i < params.stop_token_ids.size(); ++i) {
    const int32_t id = params.stop_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return OutOfRange(absl::StrCat("stop_token_ids[", i, "]"),
                        absl::StrCat("a token id in [0, ", vocab_size, ")"), id);
    }
  }
  if (params.json_schema != nullptr && params.json_output == nullptr) {
    return absl::InvalidArgumentError("JSON output: a schema without the vocabulary's bytes");
  }
  if (!params.json_prefix.empty() && params.json_output == nullptr) {
    return absl::InvalidArgumentError("JSON output: a start of the object without a constraint");
  }
  if (params.json_reasoning_open >= 0 || params.json_reasoning_close >= 0) {
    if (params.json_output == nullptr) {
      return absl::InvalidArgumentError("JSON output: reasoning tokens without a constraint");
    }
    if (!params.json_prefix.empty()) {
      return absl::InvalidArgumentError(
          "JSON output: reasoning before an object that has already begun");
    }
    for (const auto& [name, id] : {std::pair{"open", params.json_reasoning_open},
                                   std::pair{"close", params.json_reasoning_close}}) {
      if (id < 0 || id >= vocab_size) {
        return OutOfRange(absl::StrCat("the reasoning's ", name, " token"),
                          absl::StrCat("a token id in [0, ", vocab_size, ")"), id);
      }
    }
    if (params.json_reasoning_open == params.json_reasoning_close) {
      return absl::InvalidArgumentError(
          absl::StrCat("JSON output: the reasoning opens and closes with the same token ",
                       params.json_reasoning_open));
    }
  }
  if (params.json_output != nullptr && params.json_output->vocab_size() != vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("JSON output: its vocabulary has ",
                                                   params.json_output->vocab_size(),
                                                   " tokens, the model ", vocab_size));
  }
  return absl::OkStatus();
}

}  // namespace ridge
