// A set of the vocabulary's tokens as a byte trie (children contiguous, node 0 the empty prefix),
// walked from a state of a byte automaton (JsonByteState, JsonSchemaState: anything copyable with
// `bool Step(uint8_t)`): the tokens whose bytes the state can take in full, found by visiting only
// the prefixes it can take.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace ridge {

// Bit id % 64 of word id / 64: token `id` is in the set.
using TokenBits = std::vector<uint64_t>;

class TokenTrie {
 public:
  // The tokens `ids` (each with non-empty bytes[id]).
  static TokenTrie Build(std::span<const std::string> bytes, std::vector<int32_t> ids);

  // Sets the bit of every token whose bytes `state` takes in full.
  template <typename State>
  void Walk(const State& state, TokenBits* bits) const;

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

template <typename State>
void TokenTrie::Walk(const State& state, TokenBits* bits) const {
  std::vector<std::pair<uint32_t, State>> stack;
  const Node& root = nodes_[0];
  for (uint32_t c = 0; c < root.child_count; ++c) stack.emplace_back(root.first_child + c, state);
  while (!stack.empty()) {
    auto [index, s] = stack.back();
    stack.pop_back();
    const Node& node = nodes_[index];
    if (!s.Step(node.byte)) continue;  // nothing below can fit either
    for (uint32_t t = 0; t < node.token_count; ++t) {
      const int32_t id = tokens_[node.first_token + t];
      (*bits)[id / 64] |= uint64_t{1} << (id % 64);
    }
    for (uint32_t c = 0; c < node.child_count; ++c) stack.emplace_back(node.first_child + c, s);
  }
}

}  // namespace ridge
