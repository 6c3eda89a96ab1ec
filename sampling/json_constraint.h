// Constrained decoding to one JSON object (OpenAI's response_format {"type": "json_object"}):
// at each step only the tokens whose bytes keep the output a possible JSON object
// (sampling/json_grammar.h) may be drawn, and once the object is complete only a token that ends
// the output.
//
// JsonVocabulary is the model's vocabulary as bytes, in a trie, made once per server and shared
// by every constrained request; JsonConstraint is one sequence's place in its output. A step
// walks the trie from the current state and skips every subtree whose prefix is already
// impossible, so inside a string (where most tokens fit) it visits each trie node once, and
// between values only a few branches.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "sampling/json_grammar.h"
#include "sampling/token_trie.h"

namespace ridge {

class JsonVocabulary {
 public:
  // token_bytes[id]: what token `id` adds to the text (empty for tokens never allowed in JSON,
  // such as special tokens and ids past the tokenizer's vocabulary). Refused (naming it) when a
  // byte that JSON needs has no token of its own, since a constrained output could then stall.
  static absl::StatusOr<std::shared_ptr<const JsonVocabulary>> Create(
      std::span<const std::string> token_bytes);

  int32_t vocab_size() const { return vocab_size_; }
  size_t trie_nodes() const { return trie_.nodes(); }

  // allowed[id] = 1 for every token whose bytes `state` can take in full, else 0 (resized to the
  // vocabulary): one walk of the whole trie, the reference AllowedBits is tested against.
  void Allowed(const JsonByteState& state, std::vector<uint8_t>* allowed) const;

  // The same as bits, remembered for the kCachedStates states used last, by every request: an
  // output revisits few states (inside a string the state does not change from token to token).
  // Inside a string the tokens without '"' or '\' are known from the start, and only those with
  // one are walked (a walk of a 150K vocabulary's whole trie takes milliseconds, most of the
  // tokens fitting). Thread-safe.
  static constexpr size_t kCachedStates = 256;
  std::shared_ptr<const TokenBits> AllowedBits(const JsonByteState& state) const;

  // The bytes of token `id` (empty if it is never allowed).
  std::string_view bytes(int32_t id) const;

 private:
  JsonVocabulary() = default;

  struct CachedMask {
    JsonStateKey key;
    std::shared_ptr<const TokenBits> bits;
    uint64_t last_use = 0;
  };

  int32_t vocab_size_ = 0;
  std::vector<std::string> bytes_;
  TokenTrie trie_;          // every token with bytes
  TokenTrie string_exits_;  // those with a quote or a backslash: they may leave a string
  TokenBits string_stays_;  // those without, that a string takes whole
  mutable std::mutex cache_mutex_;
  mutable std::vector<CachedMask> cache_;  // guarded by cache_mutex_
  mutable uint64_t uses_ = 0;              // guarded by cache_mutex_
};

// One sequence's constrained output.
class JsonConstraint {
 public:
  // `end_ids`: the tokens that end the output (the model's end-of-sequence tokens and the
  // request's stop tokens); they are allowed once the object is complete, and only then.
  JsonConstraint(std::shared_ptr<const JsonVocabulary> vocabulary, std::vector<int32_t> end_ids);

  // Sets to -inf the logits of the tokens that may not come next, and returns the lowest id that
  // may (for a caller whose remaining logits are all -inf). Should the request's stop tokens have
  // taken every token that could go on, only the end tokens are left: the output ends there,
  // short of a whole object, rather than with no token at all.
  int32_t MaskLogits(std::span<float> logits);
  // Moves past `token`, which MaskLogits allowed (an end token moves nothing).
  void Accept(int32_t token);

  bool complete() const { return state_.complete(); }
  const JsonByteState& state() const { return state_; }

 private:
  std::shared_ptr<const JsonVocabulary> vocabulary_;
  std::vector<int32_t> end_ids_;  // sorted, distinct
  TokenBits end_bits_;            // the same as bits
  JsonByteState state_;
};

}  // namespace ridge
