// The model's vocabulary as bytes, in a trie, made once per server and shared by every
// JSON-constrained request (sampling/json_constraint.h): the mask of the tokens a state of a JSON
// automaton (JsonByteState for any object, JsonSchemaState for a schema) can take. A mask walks
// the trie from the state and skips every subtree whose prefix is already impossible; inside a
// string, where most tokens fit, only the tokens with a quote or a backslash are walked.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "sampling/json_grammar.h"
#include "sampling/mask_cache.h"
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
  // Distinct for every vocabulary this process makes (an address may be reused): what caches of
  // masks made from several vocabularies key them by.
  uint64_t serial() const { return serial_; }
  size_t trie_nodes() const { return trie_.nodes(); }

  // allowed[id] = 1 for every token whose bytes `state` can take in full, else 0 (resized to the
  // vocabulary): one walk of the whole trie, the reference Mask is tested against.
  template <typename State>
  void Allowed(const State& state, std::vector<uint8_t>* allowed) const;

  // The same as bits. Inside a string (state.in_string_body()) the tokens without '"' or '\' are
  // known from the start, and only those with one are walked (a walk of a 150K vocabulary's whole
  // trie takes milliseconds, most of the tokens fitting).
  template <typename State>
  TokenBits Mask(const State& state) const;

  // Mask for any JSON object's states, remembered for the kObjectMasks states used last,
  // by every request. Thread-safe.
  std::shared_ptr<const TokenBits> AllowedBits(const JsonByteState& state) const;

  // Whether some token is byte `b` alone (every printable ASCII byte has one: Create checks).
  bool HasTokenForByte(uint8_t b) const { return single_byte_[b]; }

  // The bytes of token `id` (empty if it is never allowed).
  std::string_view bytes(int32_t id) const;

 private:
  JsonVocabulary() = default;

  int32_t vocab_size_ = 0;
  uint64_t serial_ = 0;
  std::vector<std::string> bytes_;
  std::array<bool, 256> single_byte_{};
  TokenTrie trie_;          // every token with bytes
  TokenTrie string_exits_;  // those with a quote or a backslash: they may leave a string
  TokenBits string_stays_;  // those without, that a string takes whole
  static constexpr size_t kObjectMasks = 256;  // one cache for the whole server: 4.9 MB at 152K
  MaskCache<JsonStateKey> object_masks_{kObjectMasks};
};

template <typename State>
void JsonVocabulary::Allowed(const State& state, std::vector<uint8_t>* allowed) const {
  TokenBits bits((vocab_size_ + 63) / 64, 0);
  trie_.Walk(state, &bits);
  allowed->assign(vocab_size_, 0);
  for (int32_t id = 0; id < vocab_size_; ++id) (*allowed)[id] = (bits[id / 64] >> (id % 64)) & 1u;
}

template <typename State>
TokenBits JsonVocabulary::Mask(const State& state) const {
  if (state.in_string_body()) {
    TokenBits bits = string_stays_;
    string_exits_.Walk(state, &bits);
    return bits;
  }
  TokenBits bits((vocab_size_ + 63) / 64, 0);
  trie_.Walk(state, &bits);
  return bits;
}

}  // namespace ridge
