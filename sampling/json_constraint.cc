#include "sampling/json_constraint.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "base/check.h"

namespace ridge {
namespace {

// Steps `state` through `text` up to its first byte that does not fit; returns how many did.
template <typename State>
size_t StepWhileFitting(State& state, std::string_view text) {
  size_t n = 0;
  while (n < text.size() && state.Step(static_cast<uint8_t>(text[n]))) ++n;
  return n;
}

}  // namespace

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonVocabulary> vocabulary,
                               std::vector<int32_t> end_ids,
                               std::shared_ptr<const JsonSchema> schema)
    : vocabulary_(std::move(vocabulary)),
      schema_(std::move(schema)),
      end_ids_(std::move(end_ids)),
      state_(schema_ == nullptr ? decltype(state_)(JsonByteState())
                                : decltype(state_)(JsonSchemaState(schema_.get()))) {
  std::sort(end_ids_.begin(), end_ids_.end());
  end_ids_.erase(std::unique(end_ids_.begin(), end_ids_.end()), end_ids_.end());
  RIDGE_CHECK(!end_ids_.empty());
  end_bits_.assign((vocabulary_->vocab_size() + 63) / 64, 0);
  for (int32_t id : end_ids_) {
    RIDGE_CHECK(id >= 0 && id < vocabulary_->vocab_size());
    end_bits_[id / 64] |= uint64_t{1} << (id % 64);
  }
}

void JsonConstraint::AllowReasoningFirst(int32_t open, int32_t close) {
  RIDGE_CHECK(open >= 0 && open < vocabulary_->vocab_size());
  RIDGE_CHECK(close >= 0 && close < vocabulary_->vocab_size() && close != open);
  RIDGE_CHECK(phase_ == Phase::kInstance && !InstanceComplete());
  phase_ = Phase::kMayReason;
  reasoning_open_ = open;
  reasoning_close_ = close;
}

bool JsonConstraint::InstanceComplete() const {
  return std::visit([](const auto& s) { return s.complete(); }, state_);
}

bool JsonConstraint::complete() const { return phase_ != Phase::kReasoning && InstanceComplete(); }

std::shared_ptr<const TokenBits> JsonConstraint::AllowedBits() const {
  if (const auto* s = std::get_if<JsonSchemaState>(&state_)) {
    return schema_->AllowedBits(*vocabulary_, *s);
  }
  return vocabulary_->AllowedBits(std::get<JsonByteState>(state_));
}

int32_t JsonConstraint::MaskLogits(std::span<float> logits) {
  RIDGE_CHECK(logits.size() == static_cast<size_t>(vocabulary_->vocab_size()));
  if (phase_ == Phase::kReasoning) return 0;  // every token, until the reasoning closes
  if (phase_ == Phase::kMayReason) {          // the instance's first tokens, or reasoning
    const float open = logits[reasoning_open_];
    const int32_t lowest = MaskInstance(logits);
    logits[reasoning_open_] = open;
    return std::min(lowest, reasoning_open_);
  }
  return MaskInstance(logits);
}

int32_t JsonConstraint::MaskInstance(std::span<float> logits) {
  constexpr float kRefused = -std::numeric_limits<float>::infinity();
  if (!InstanceComplete()) {
    // The end tokens are refused until the instance is complete: a special token has no bytes,
    // but one that is text (a stop token) must not slip into the instance either.
    const std::shared_ptr<const TokenBits> bits = AllowedBits();
    int32_t lowest = -1;
    for (size_t word = 0; word < bits->size() && lowest < 0; ++word) {
      const uint64_t going_on = (*bits)[word] & ~end_bits_[word];
      if (going_on != 0) lowest = static_cast<int32_t>(word * 64 + std::countr_zero(going_on));
    }
    if (lowest >= 0) {
      for (size_t word = 0; word < bits->size(); ++word) {
        const uint64_t keep = (*bits)[word] & ~end_bits_[word];
        const size_t begin = word * 64, end = std::min(begin + 64, logits.size());
        if (keep == 0) {
          std::fill(logits.begin() + begin, logits.begin() + end, kRefused);
          continue;
        }
        for (size_t id = begin; id < end; ++id) {
          if (((keep >> (id - begin)) & 1u) == 0) logits[id] = kRefused;
        }
      }
      return lowest;
    }
  }
  // Only an end token: they keep their logits, the rest are refused.
  std::vector<float> end_logits;
  for (int32_t id : end_ids_) end_logits.push_back(logits[id]);
  std::fill(logits.begin(), logits.end(), kRefused);
  for (size_t i = 0; i < end_ids_.size(); ++i) logits[end_ids_[i]] = end_logits[i];
  return end_ids_.front();
}

void JsonConstraint::Accept(int32_t token) {
  RIDGE_CHECK(token >= 0 && token < vocabulary_->vocab_size());
  if (phase_ == Phase::kReasoning) {
    if (token == reasoning_close_) phase_ = Phase::kInstance;
    return;
  }
  if (phase_ == Phase::kMayReason) {
    phase_ = token == reasoning_open_ ? Phase::kReasoning : Phase::kInstance;
    if (phase_ == Phase::kReasoning) return;
  }
  if (InstanceComplete() || ((end_bits_[token / 64] >> (token % 64)) & 1u) != 0) return;
  std::visit(
      [&](auto& s) {
        for (char c : vocabulary_->bytes(token)) {
          const bool fits = s.Step(static_cast<uint8_t>(c));
          RIDGE_CHECK(fits);  // MaskLogits allowed only tokens that fit
        }
      },
      state_);
}

size_t JsonConstraint::AcceptPrefix(std::string_view text) {
  RIDGE_CHECK(phase_ == Phase::kInstance || text.empty());
  auto state = state_;
  const size_t fitting = std::visit([&](auto& s) { return StepWhileFitting(s, text); }, state);
  if (fitting == text.size()) state_ = std::move(state);
  return fitting;
}

size_t JsonStartFitting(const JsonSchema* schema, std::string_view text) {
  if (schema == nullptr) {
    JsonByteState state;
    return StepWhileFitting(state, text);
  }
  JsonSchemaState state(schema);
  return StepWhileFitting(state, text);
}

}  // namespace ridge
