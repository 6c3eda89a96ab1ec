#include "sampling/token_trie.h"

#include <algorithm>

namespace ridge {

TokenTrie TokenTrie::Build(std::span<const std::string> bytes, std::vector<int32_t> ids) {
  // The byte strings sorted, then each node's range of them split by the byte at its depth,
  // breadth first, so that a node's children are contiguous.
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes[a] != bytes[b] ? bytes[a] < bytes[b] : a < b;
  });
  struct Range {
    uint32_t node;
    size_t begin, end, depth;
  };
  TokenTrie trie;
  std::vector<Range> queue = {{0, 0, ids.size(), 0}};
  trie.nodes_.emplace_back();
  for (size_t q = 0; q < queue.size(); ++q) {
    const Range r = queue[q];
    size_t i = r.begin;
    // Sorted: the strings that end at this node come first.
    const auto first_token = static_cast<uint32_t>(trie.tokens_.size());
    while (i < r.end && bytes[ids[i]].size() == r.depth) trie.tokens_.push_back(ids[i++]);
    Node& node = trie.nodes_[r.node];
    node.first_token = first_token;
    node.token_count = static_cast<uint32_t>(trie.tokens_.size()) - first_token;
    node.first_child = static_cast<uint32_t>(trie.nodes_.size());
    while (i < r.end) {
      const char byte = bytes[ids[i]][r.depth];
      size_t j = i;
      while (j < r.end && bytes[ids[j]][r.depth] == byte) ++j;
      const auto index = static_cast<uint32_t>(trie.nodes_.size());
      trie.nodes_.push_back(Node{.byte = static_cast<uint8_t>(byte)});
      ++trie.nodes_[r.node].child_count;
      queue.push_back({index, i, j, r.depth + 1});
      i = j;
    }
  }
  return trie;
}

}  // namespace ridge
