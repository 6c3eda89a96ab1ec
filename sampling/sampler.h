// Turns one row of logits into the next token of one sequence: penalties, then temperature,
// top-k, top-p and min-p (vLLM V0's order; V1 applies min-p before top-k/top-p), then a draw
// from the sequence's own random stream. O(V) per call except for sorting top-p's boundary
// bucket (O(V log V) only if every weight falls in it).
//
// Non-finite logits: NaN is read as -inf (the token can never be chosen), +inf as "certain"
// (the +inf tokens share all the probability equally). If no token has a logit above -inf the
// sampler falls back to token 0 rather than abort; callers that care should check the model's
// output for NaN themselves.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "sampling/json_constraint.h"
#include "sampling/sampling_params.h"

namespace ridge {

class Sampler {
 public:
  // Validates `params` and builds the sampler of one sequence. With params.seed set, the
  // tokens drawn are a function of the seed and the inputs alone (std::mt19937_64 is fully
  // specified, no library distribution is used, and the draw walks token ids in order, not in
  // whatever order a selection algorithm left them); without it, the sampler is seeded from
  // std::random_device.
  // `end_ids` are the tokens that end the output (the model's end-of-sequence tokens unless
  // ignore_eos, and the request's stop tokens): with params.json_output they may end it once the
  // object is complete (none is an error then); with params.min_tokens they are not sampled
  // before that many tokens.
  static absl::StatusOr<Sampler> Create(const SamplingParams& params, int32_t vocab_size,
                                        std::span<const int32_t> end_ids = {});

  // Picks the next token. `logits` has vocab_size entries; token ids must be in [0, vocab_size)
  // (the engine validates prompts on admission, so a bad id here is a bug and aborts).
  // Allocation-free after the first call, which allocates the scratch space (four vocabulary-
  // sized arrays: a sequence sampled on a GPU never needs them, and allocating them for every
  // request, then freeing them on the engine thread, cost both threads time).
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> prompt_tokens,
                 std::span<const int32_t> generated_tokens) {
    return SampleWithUniform(logits, prompt_tokens, generated_tokens, NextDrawUniform());
  }

  // Sample with the draw's uniform given: the value NextDrawUniform() returned. A backend that
  // samples on its device takes the uniform here and gets the CPU's answer for the same stream.
  int32_t SampleWithUniform(std::span<const float> logits, std::span<const int32_t> prompt_tokens,
                            std::span<const int32_t> generated_tokens, double uniform);

  // The uniform in [0, 1) the next sample draws with: one value from the sequence's random
  // stream when the temperature is above 0, else 0 without touching the stream.
  double NextDrawUniform() { return params_.temperature > 0.0f ? NextUniform() : 0.0; }

  // The stage of Sample after the logit bias, in place, exposed for tests: the repetition
  // penalty over the
  // distinct tokens of prompt + generated (positive logits divided, negative ones multiplied),
  // then logit -= frequency_penalty * count + presence_penalty * (count > 0) over the
  // generated tokens only.
  void ApplyPenalties(std::span<float> logits, std::span<const int32_t> prompt_tokens,
                      std::span<const int32_t> generated_tokens);

  // True when Sample, after `generated` tokens, is a plain argmax of the logits (temperature 0,
  // no penalties, no logit bias, no JSON constraint, no end tokens held off by min_tokens): a
  // backend can then pick the token itself without sending the logits anywhere.
  bool IsPlainArgmax(size_t generated) const {
    return params_.temperature == 0.0f && params_.repetition_penalty == 1.0f &&
           params_.presence_penalty == 0.0f && params_.frequency_penalty == 0.0f &&
           params_.logit_bias.empty() && json_ == nullptr && !HoldsEndTokens(generated);
  }
  // True when only the host can pick the token after `generated` ones (a logit bias, the JSON
  // constraint's mask, end tokens held off by min_tokens: a device's sampler applies none of
  // them): a backend then hands the logits to Sample.
  bool NeedsHostLogits(size_t generated) const {
    return !params_.logit_bias.empty() || json_ != nullptr || HoldsEndTokens(generated);
  }
  // Whether the end tokens are not sampled after `generated` tokens (min_tokens not reached).
  bool HoldsEndTokens(size_t generated) const {
    return !min_tokens_ends_.empty() && generated < static_cast<size_t>(params_.min_tokens);
  }
  // The JSON constraint's state, if the output is constrained.
  const JsonConstraint* json_constraint() const { return json_.get(); }

  const SamplingParams& params() const { return params_; }
  int32_t vocab_size() const { return vocab_size_; }

 private:
  Sampler(const SamplingParams& params, int32_t vocab_size, uint64_t seed,
          std::unique_ptr<JsonConstraint> json, std::vector<int32_t> min_tokens_ends);

  // Uniform in [0, 1) with 53 random bits, computed here so that no standard library
  // distribution (whose algorithms differ between implementations) is involved.
  double NextUniform() { return static_cast<double>(rng_() >> 11) * 0x1p-53; }

  int32_t SampleAtTemperature(double uniform);
  void ComputeWeights(float max_logit);
  size_t KeepTopK();
  size_t KeepTopP(size_t size);
  int32_t Draw(uint64_t max_kept_key, double uniform);
  void EnsureScratch();  // allocates the scratch below on first use

  SamplingParams params_;
  int32_t vocab_size_;
  std::mt19937_64 rng_;
  std::unique_ptr<JsonConstraint> json_;  // null when unconstrained
  std::vector<int32_t> min_tokens_ends_;  // end tokens held off before min_tokens (else empty)

  // Scratch, vocab_size entries each once allocated (empty before the first call), reused by
  // every call.
  std::vector<float> logits_;         // Penalised logits, NaN replaced by -inf.
  std::vector<float> weights_;        // Unnormalised probabilities, 1 for the best token.
  std::vector<uint64_t> rank_keys_;   // Candidates for top-k / top-p, see RankKey in sampler.cc.
  std::vector<int32_t> token_marks_;  // Zero between calls; counts or "seen" marks within one.
};

// Log-softmax of the raw `logits` (before penalties and temperature, as OpenAI and vLLM report
// them) for the `n` most likely tokens, most likely first, lowest id first on ties. Writes
// min(n, vocab) pairs (token, logprob) into `out`, reusing its capacity.
void TopLogprobs(std::span<const float> logits, int n, std::vector<std::pair<int32_t, float>>* out);

// Log-softmax of the raw `logits` at `token`, e.g. the logprob of the sampled token.
float TokenLogprob(std::span<const float> logits, int32_t token);

}  // namespace ridge
