#include "sampling/sampler.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"
#include "kernels/elementwise.h"

namespace ridge {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Up to this k, top-k keeps a heap of the best tokens; above it, nth_element is faster.
constexpr size_t kHeapTopKLimit = 1024;

// Top-p buckets weights, which lie in [0, 1], by their float bits: 8 exponent bits and the top
// 4 mantissa bits, i.e. 16 buckets per power of two. 1.0f is 0x3f800000, so 2048 buckets hold
// every weight.
constexpr int kNumWeightBuckets = 2048;
constexpr int kWeightBucketShift = 19;

int WeightBucket(float weight) {
  return static_cast<int>(std::bit_cast<uint32_t>(weight) >> kWeightBucketShift);
}

// A token's rank as one integer: ascending keys are descending logits, ties broken by the
// lower id, so selection and sorting run on plain integers instead of an indirect comparator.
// Top-k = 1 thus agrees with greedy's "lowest id on ties". Logits must not be NaN.
uint64_t RankKey(float logit, int32_t token) {
  uint32_t bits = std::bit_cast<uint32_t>(logit + 0.0f);  // + 0 turns -0 into +0.
  // Maps floats onto unsigned integers in the same order, then reverses that order.
  bits = (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
  return (static_cast<uint64_t>(~bits) << 32) | static_cast<uint32_t>(token);
}

int32_t TokenOfRankKey(uint64_t key) { return static_cast<int32_t>(key & 0xffffffffu); }

float NanToNegativeInf(float logit) { return std::isnan(logit) ? -kInf : logit; }

// The normaliser of a log-softmax, with the non-finite cases kept apart so that no inf - inf
// turns into NaN.
struct LogSoftmaxNormalizer {
  float max_logit = -kInf;
  double log_sum_exp = 0.0;  // log(sum(exp(logit - max_logit))) when max_logit is finite.
  int64_t num_positive_inf = 0;
};

LogSoftmaxNormalizer ComputeNormalizer(std::span<const float> logits) {
  LogSoftmaxNormalizer norm;
  for (float logit : logits) norm.max_logit = std::max(norm.max_logit, NanToNegativeInf(logit));
  if (norm.max_logit == kInf) {
    for (float logit : logits) norm.num_positive_inf += (logit == kInf);
  } else if (norm.max_logit > -kInf) {
    double sum = 0.0;
    for (float logit : logits) {
      sum += std::exp(static_cast<double>(NanToNegativeInf(logit)) - norm.max_logit);
    }
    norm.log_sum_exp = std::log(sum);
  }
  return norm;
}

float LogProb(float logit, const LogSoftmaxNormalizer& norm) {
  logit = NanToNegativeInf(logit);
  if (norm.max_logit == kInf) {
    return logit == kInf ? static_cast<float>(-std::log(static_cast<double>(norm.num_positive_inf)))
                         : -kInf;
  }
  if (logit == -kInf) return -kInf;  // Also covers "no usable logit at all".
  return static_cast<float>(static_cast<double>(logit) - norm.max_logit - norm.log_sum_exp);
}

}  // namespace

absl::StatusOr<Sampler> Sampler::Create(const SamplingParams& params, int32_t vocab_size,
                                        std::span<const int32_t> end_ids) {
  RETURN_IF_ERROR(ValidateSamplingParams(params, vocab_size));
  if (params.json_output != nullptr || params.min_tokens > 0) {  // the two users of end_ids
    for (int32_t id : end_ids) {
      if (id < 0 || id >= vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("the end token ", id, " is outside the vocabulary [0, ", vocab_size, ")"));
      }
    }
  }
  std::unique_ptr<JsonConstraint> json;
  if (params.json_output != nullptr) {
    if (end_ids.empty()) {
      return absl::InvalidArgumentError(
          "JSON output needs a token that ends it (an end-of-sequence or stop token), and this "
          "request has none (ignore_eos is set, or the model names no end-of-sequence token)");
    }
    if (params.json_schema != nullptr) {
      RETURN_IF_ERROR(params.json_schema->CheckSpelling(*params.json_output));
    }
    json = std::make_unique<JsonConstraint>(params.json_output,
                                            std::vector<int32_t>(end_ids.begin(), end_ids.end()),
                                            params.json_schema);
    const std::string_view prefix = params.json_prefix;
    if (const size_t fitting = json->AcceptPrefix(prefix); fitting < prefix.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("JSON output: no instance begins with the text it is to go on from; its "
                       "first ",
                       fitting, " bytes could begin one, not the byte after them, '",
                       absl::CEscape(std::string(prefix.substr(fitting, 1))), "'"));
    }
    if (params.json_reasoning_open >= 0) {
      json->AllowReasoningFirst(params.json_reasoning_open, params.json_reasoning_close);
    }
  }
  std::vector<int32_t> min_tokens_ends;
  if (params.min_tokens > 0) min_tokens_ends.assign(end_ids.begin(), end_ids.end());
  uint64_t seed;
  if (params.seed.has_value()) {
    seed = *params.seed;
  } else {
    std::random_device device;  // Yields 32 bits per call.
    seed = (static_cast<uint64_t>(device()) << 32) | device();
  }
  return Sampler(params, vocab_size, seed, std::move(json), std::move(min_tokens_ends));
}

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size, uint64_t seed,
                 std::unique_ptr<JsonConstraint> json, std::vector<int32_t> min_tokens_ends)
    : params_(params),
      vocab_size_(vocab_size),
      rng_(seed),
      json_(std::move(json)),
      min_tokens_ends_(std::move(min_tokens_ends)) {}

void Sampler::EnsureScratch() {
  if (!token_marks_.empty()) return;
  logits_.resize(vocab_size_);
  weights_.resize(vocab_size_);
  rank_keys_.resize(vocab_size_);
  token_marks_.assign(vocab_size_, 0);
}

int32_t Sampler::SampleWithUniform(std::span<const float> logits,
                                   std::span<const int32_t> prompt_tokens,
                                   std::span<const int32_t> generated_tokens, double uniform) {
  RIDGE_CHECK(logits.size() == static_cast<size_t>(vocab_size_));
  EnsureScratch();
  std::transform(logits.begin(), logits.end(), logits_.begin(), NanToNegativeInf);
  for (const auto& [token, bias] : params_.logit_bias) logits_[token] += bias;
  if (HoldsEndTokens(generated_tokens.size())) {
    for (int32_t id : min_tokens_ends_) logits_[id] = -kInf;
  }
  ApplyPenalties(logits_, prompt_tokens, generated_tokens);
  if (json_ == nullptr) {
    if (params_.temperature == 0.0f) return GreedyToken(logits_);
    return SampleAtTemperature(uniform);
  }
  const int32_t lowest_allowed = json_->MaskLogits(logits_);
  int32_t token = lowest_allowed;
  if (*std::max_element(logits_.begin(), logits_.end()) > -kInf) {  // else every allowed is -inf
    token = params_.temperature == 0.0f ? GreedyToken(logits_) : SampleAtTemperature(uniform);
  }
  json_->Accept(token);
  return token;
}

void Sampler::ApplyPenalties(std::span<float> logits, std::span<const int32_t> prompt_tokens,
                             std::span<const int32_t> generated_tokens) {
  RIDGE_CHECK(logits.size() == static_cast<size_t>(vocab_size_));
  EnsureScratch();
  auto check_id = [this](int32_t token) { RIDGE_CHECK(token >= 0 && token < vocab_size_); };

  const float repetition = params_.repetition_penalty;
  if (repetition != 1.0f) {
    // Once per distinct token, however often it occurs, as Hugging Face and vLLM do.
    auto penalise_once = [&](int32_t token) {
      check_id(token);
      if (token_marks_[token] != 0) return;
      token_marks_[token] = 1;
      float& logit = logits[token];
      logit = logit > 0.0f ? logit / repetition : logit * repetition;
    };
    for (int32_t token : prompt_tokens) penalise_once(token);
    for (int32_t token : generated_tokens) penalise_once(token);
    for (int32_t token : prompt_tokens) token_marks_[token] = 0;
    for (int32_t token : generated_tokens) token_marks_[token] = 0;
  }

  const float frequency = params_.frequency_penalty;
  const float presence = params_.presence_penalty;
  if (frequency != 0.0f || presence != 0.0f) {
    for (int32_t token : generated_tokens) {
      check_id(token);
      ++token_marks_[token];
    }
    // The first occurrence applies the whole count and clears it, so repeats are skipped.
    for (int32_t token : generated_tokens) {
      const int32_t count = token_marks_[token];
      if (count == 0) continue;
      logits[token] -= frequency * static_cast<float>(count) + presence;
      token_marks_[token] = 0;
    }
  }
}

int32_t Sampler::SampleAtTemperature(double uniform) {
  const float max_logit = *std::max_element(logits_.begin(), logits_.end());
  if (max_logit == -kInf) return 0;  // No token is possible; the documented fallback.
  ComputeWeights(max_logit);

  // top-k and top-p select a set of best-ranked tokens; it is handed on as the largest kept
  // rank key, so the draw can walk the vocabulary in id order whatever order the selection
  // algorithms left the candidates in.
  uint64_t max_kept_key = std::numeric_limits<uint64_t>::max();
  const bool top_k_on = params_.top_k > 0 && params_.top_k < vocab_size_;
  const bool top_p_on = params_.top_p < 1.0f;
  if (top_k_on || top_p_on) {
    size_t size;
    if (top_k_on) {
      size = KeepTopK();
    } else {
      for (int32_t token = 0; token < vocab_size_; ++token) {
        rank_keys_[token] = RankKey(logits_[token], token);
      }
      size = rank_keys_.size();
    }
    if (top_p_on) size = KeepTopP(size);
    max_kept_key = *std::max_element(rank_keys_.begin(), rank_keys_.begin() + size);
  }
  return Draw(max_kept_key, uniform);
}

void Sampler::ComputeWeights(float max_logit) {
  if (max_logit == kInf) {
    // The limit of the softmax: the +inf tokens share all the mass.
    for (size_t i = 0; i < logits_.size(); ++i) weights_[i] = logits_[i] == kInf ? 1.0f : 0.0f;
    return;
  }
  // Subtracting the maximum keeps exp() in range and gives the best token weight 1 exactly, at
  // any temperature however small. Float exp is twice as fast as double here, and its error
  // (an ulp or two) is far below anything sampling can observe.
  const float temperature = params_.temperature;
  for (size_t i = 0; i < logits_.size(); ++i) {
    weights_[i] = std::exp((logits_[i] - max_logit) / temperature);
  }
}

size_t Sampler::KeepTopK() {
  const size_t k = static_cast<size_t>(params_.top_k);
  uint64_t* const keys = rank_keys_.data();
  if (k > kHeapTopKLimit) {
    for (int32_t token = 0; token < vocab_size_; ++token) {
      keys[token] = RankKey(logits_[token], token);
    }
    std::nth_element(keys, keys + k, keys + vocab_size_);
    return k;
  }
  // A heap of the k best keys, worst on top: once it is full nearly every token loses one
  // well-predicted comparison with the top, several times faster than nth_element.
  size_t heap_size = 0;
  for (int32_t token = 0; token < vocab_size_; ++token) {
    const uint64_t key = RankKey(logits_[token], token);
    if (heap_size < k) {
      keys[heap_size++] = key;
      std::push_heap(keys, keys + heap_size);
    } else if (key < keys[0]) {
      std::pop_heap(keys, keys + k);
      keys[k - 1] = key;
      std::push_heap(keys, keys + k);
    }
  }
  return k;
}

size_t Sampler::KeepTopP(size_t size) {
  // Radix selection: a histogram of the mass by weight bucket finds the bucket where the
  // cumulative mass crosses top_p; only that bucket's tokens need sorting. A higher bucket means
  // a higher weight, hence a better rank, so buckets never reorder tokens. O(V) passes, plus a
  // sort of one bucket (all of them only if all weights are within 1/16 of a binade).
  uint64_t* const keys = rank_keys_.data();
  auto weight_of = [&](uint64_t key) { return weights_[TokenOfRankKey(key)]; };
  std::array<double, kNumWeightBuckets> bucket_mass{};
  double total = 0.0;
  for (size_t i = 0; i < size; ++i) {
    const float weight = weight_of(keys[i]);
    bucket_mass[WeightBucket(weight)] += weight;
    total += weight;
  }
  const double target = static_cast<double>(params_.top_p) * total;

  double mass_above = 0.0;  // Mass of the buckets above `boundary`.
  int boundary = kNumWeightBuckets - 1;
  while (boundary >= 0 && mass_above + bucket_mass[boundary] < target) {
    mass_above += bucket_mass[boundary--];
  }
  if (boundary < 0) return size;  // Only rounding gets here: keep everything.

  uint64_t* const above_end = std::partition(
      keys, keys + size, [&](uint64_t key) { return WeightBucket(weight_of(key)) > boundary; });
  uint64_t* const boundary_end = std::partition(above_end, keys + size, [&](uint64_t key) {
    return WeightBucket(weight_of(key)) == boundary;
  });
  std::sort(above_end, boundary_end);
  // target > 0 (the best token has weight 1), so at least one token is always kept.
  double cumulative = mass_above;
  for (uint64_t* key = above_end; key < boundary_end; ++key) {
    cumulative += weight_of(*key);
    if (cumulative >= target) return key + 1 - keys;
  }
  return boundary_end - keys;  // Only rounding gets here: keep the whole boundary bucket.
}

int32_t Sampler::Draw(uint64_t max_kept_key, double uniform) {
  // min-p: the best token has weight 1 and always survives top-k and top-p, so "prob < min_p *
  // max_prob" is "weight < min_p", and min_p <= 1 keeps the best token.
  const float min_p = params_.min_p;
  const bool cut_by_rank = max_kept_key != std::numeric_limits<uint64_t>::max();
  double total = 0.0;
  for (int32_t token = 0; token < vocab_size_; ++token) {
    float& weight = weights_[token];
    if (weight < min_p || (cut_by_rank && RankKey(logits_[token], token) > max_kept_key)) {
      weight = 0.0f;
    }
    total += weight;
  }
  RIDGE_CHECK(total > 0.0);
  const double threshold = uniform * total;
  double cumulative = 0.0;
  for (int32_t token = 0; token < vocab_size_; ++token) {
    cumulative += weights_[token];
    if (threshold < cumulative) return token;
  }
  // Rounding can make threshold == total; the last token with weight is then the right pick.
  for (int32_t token = vocab_size_ - 1; token >= 0; --token) {
    if (weights_[token] > 0.0f) return token;
  }
  RIDGE_CHECK(false);
  return 0;
}

void TopLogprobs(std::span<const float> logits, int n,
                 std::vector<std::pair<int32_t, float>>* out) {
  RIDGE_CHECK(n >= 0);
  RIDGE_CHECK(out != nullptr);
  out->clear();
  const size_t count = std::min(static_cast<size_t>(n), logits.size());
  if (count == 0) return;

  // A heap of the best `count` (token, logit) pairs with the worst on top: O(V log n).
  auto better = [](const std::pair<int32_t, float>& a, const std::pair<int32_t, float>& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  };
  for (size_t i = 0; i < logits.size(); ++i) {
    const std::pair<int32_t, float> entry(static_cast<int32_t>(i), NanToNegativeInf(logits[i]));
    if (out->size() < count) {
      out->push_back(entry);
      std::push_heap(out->begin(), out->end(), better);
    } else if (better(entry, out->front())) {
      std::pop_heap(out->begin(), out->end(), better);
      out->back() = entry;
      std::push_heap(out->begin(), out->end(), better);
    }
  }
  std::sort_heap(out->begin(), out->end(), better);

  const LogSoftmaxNormalizer norm = ComputeNormalizer(logits);
  for (auto& entry : *out) entry.second = LogProb(entry.second, norm);
}

float TokenLogprob(std::span<const float> logits, int32_t token) {
  RIDGE_CHECK(token >= 0 && static_cast<size_t>(token) < logits.size());
  return LogProb(logits[token], ComputeNormalizer(logits));
}

}  // namespace ridge
