// A set of the vocabulary's tokens as a byte trie (children contiguous, node 0 the empty prefix),
// walked from a JSON state: the tokens whose bytes the state can take in full, found by visiting
// only the prefixes it can take.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sampling/json_grammar.h"

namespace ridge {

// Bit id % 64 of word id / 64: token `id` is in the set.
using TokenBits = std::vector<uint64_t>;

class TokenTrie {
 public:
  using WalkStack = std::vector<std::pair<uint32_t, JsonByteState>>;

  // The tokens `ids` (each with non-empty bytes[id]).
  static TokenTrie Build(std::span<const std::string> bytes, std::vector<int32_t> ids);

  // Sets the bit of every token whose bytes `state` takes in full. `stack` is scratch.
  void Walk(const JsonByteState& state, TokenBits* bits, WalkStack* stack) const;

  size_t nodes() const { return nodes_.size(); }

 private:
  struct Node {
    uint32_t first_child = 0;
    uint32_t child_count = 0;
    uint32_t first_token = 0;  // into tokens_: the ids whose bytes end at this node
    uint32_t token_count = 0;
    uint8_t byte = 0;  // the byte on the edge from its parent
  };

  std::vector<Node> nodes_;
  std::vector<int32_t> tokens_;
};

}  // namespace ridge
