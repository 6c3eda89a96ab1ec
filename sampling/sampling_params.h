// Per-request sampling parameters. Names and meanings follow vLLM and the OpenAI API so that
// the HTTP and gRPC layers can map request fields one to one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace ridge {

class JsonSchema;
class JsonVocabulary;

struct SamplingParams {
  int32_t max_tokens = 16;
  float temperature = 1.0f;         // 0 selects greedy decoding.
  float top_p = 1.0f;               // 1 = off.
  int32_t top_k = 0;                // 0, or any value >= the vocabulary size, = off.
  float min_p = 0.0f;               // 0 = off.
  float repetition_penalty = 1.0f;  // Hugging Face semantics; 1 = off.
  float presence_penalty = 0.0f;    // OpenAI semantics; 0 = off.
  float frequency_penalty = 0.0f;   // OpenAI semantics; 0 = off.
  std::optional<uint64_t> seed;     // Unset: a fresh random seed per sequence.
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  // vLLM's min_tokens: the tokens that end the output (the model's end-of-sequence tokens unless
  // ignore_eos, and stop_token_ids) are not sampled, and stop strings do not match, before this
  // many tokens. 0 to max_tokens; 0 = off. Not with a JSON constraint (which must end).
  int32_t min_tokens = 0;
  // OpenAI's logit_bias: added to the named tokens' logits before the penalties and the
  // temperature (+-100 all but forces or bans a token). Ids distinct, biases in [-100, 100].
  std::vector<std::pair<int32_t, float>> logit_bias = {};
  // Set: the output is constrained to one JSON object (response_format json_object), then ends
  // (sampling/json_constraint.h); the vocabulary's bytes, shared by every such request.
  std::shared_ptr<const JsonVocabulary> json_output = nullptr;
  // Set beside json_output: the object is an instance of this schema (response_format
  // json_schema, sampling/json_schema.h), not any object.
  std::shared_ptr<const JsonSchema> json_schema = nullptr;
  // Beside json_output: the object has begun with this text before the output (a chat's final
  // message continued, continue_final_message), and the output is the rest of it.
  std::string json_prefix = {};
  // Beside json_output, for a reasoning model (a server's --reasoning-parser): the tokens that
  // open and close its reasoning ("<think>", "</think>"), which the output may begin with before
  // the object (JsonConstraint::AllowReasoningFirst). -1: the object from the first token.
  int32_t json_reasoning_open = -1, json_reasoning_close = -1;
};

inline constexpr size_t kMaxLogitBiasEntries = 1024;

// The largest temperature and repetition penalty a request may ask for, on every transport (the
// OpenAI API's temperature range is [0, 2]).
inline constexpr float kMaxTemperature = 2.0f;
inline constexpr float kMaxRepetitionPenalty = 10.0f;

// Returns InvalidArgument naming the first field that is out of range (NaN is out of range
// everywhere), with the allowed range in the message. `vocab_size` must be positive.
absl::Status ValidateSamplingParams(const SamplingParams& params, int32_t vocab_size);

}  // namespace ridge
