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

namespace ridge {

class JsonVocabulary {
 public:
  // token_bytes[id]: what token `id` adds to the text (empty for tokens never allowed in JSON,
  // such as special tokens and ids past the tokenizer's vocabulary). Refused (naming it) when a
  // byte that JSON needs has no token of its own, since a constrained output could then stall.
  static absl::StatusOr<std::shared_ptr<const JsonVocabulary>> Create(
      std::span<const std::string> token_bytes);

  int32_t vocab_size() const { return vocab_size_; }
  size_t trie_nodes() const { return nodes_.size(); }

  // allowed[id] = 1 for every token whose bytes `state` can take in full, else 0 (resized to the
  // vocabulary). `stack` is scratch, reused between calls.
  void Allowed(const JsonByteState& state, std::vector<uint8_t>* allowed,
               std::vector<std::pair<uint32_t, JsonByteState>>* stack) const;

  // The same as bits (bit id % 64 of word id / 64), remembered for the kCachedStates states used
  // last, by every request: an output revisits few states (inside a string the state does not
  // change from token to token), and a walk of a 150K vocabulary's trie takes milliseconds.
  // Thread-safe.
  using TokenBits = std::vector<uint64_t>;
  static constexpr size_t kCachedStates = 256;
  std::shared_ptr<const TokenBits> AllowedBits(const JsonByteState& state) const;

  // The bytes of token `id` (empty if it is never allowed).
  std::string_view bytes(int32_t id) const;

 private:
  // Children of a node are contiguous; node 0 is the root (the empty prefix).
  struct Node {
    uint32_t first_child = 0;
    uint32_t child_count = 0;
    uint32_t first_token = 0;  // into tokens_: the ids whose bytes end at this node
    uint32_t token_count = 0;
    uint8_t byte = 0;  // the byte on the edge from its parent
  };

  JsonVocabulary() = default;

  struct CachedMask {
    JsonStateKey key;
    std::shared_ptr<const TokenBits> bits;
    uint64_t last_use = 0;
  };

  int32_t vocab_size_ = 0;
  mutable std::mutex cache_mutex_;
  mutable std::vector<CachedMask> cache_;  // guarded by cache_mutex_
  mutable uint64_t uses_ = 0;              // guarded by cache_mutex_
  std::vector<Node> nodes_;
  std::vector<int32_t> tokens_;
  std::vector<std::string> bytes_;
};

// One sequence's constrained output.
class JsonConstraint {
 public:
  // `end_ids`: the tokens that end the output (the model's end-of-sequence tokens and the
  // request's stop tokens); they are allowed once the object is complete, and only then.
  JsonConstraint(std::shared_ptr<const JsonVocabulary> vocabulary, std::vector<int32_t> end_ids);

  // Sets to -inf the logits of the tokens that may not come next. Returns the lowest id that may
  // (-1 if none), for a caller whose remaining logits are all -inf.
  int32_t MaskLogits(std::span<float> logits);
  // Moves past `token`, which MaskLogits allowed.
  void Accept(int32_t token);

  bool complete() const { return state_.complete(); }
  const JsonByteState& state() const { return state_; }

 private:
  std::shared_ptr<const JsonVocabulary> vocabulary_;
  std::vector<int32_t> end_ids_;
  JsonByteState state_;
};

}  // namespace ridge
