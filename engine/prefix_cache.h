// The prefix cache's index: per namespace (a request's cache salt and solver budget: a state
// depends on both), a radix tree over token ids whose nodes may hold a snapshot: a state slot
// holding the whole recurrent state after exactly the node's tokens, and the KV block ids that
// cover those positions. Bookkeeping only: the engine copies states and holds block references
// (engine/cached_memory.h); this finds the deepest usable snapshot and picks what to evict
// (least recently used first; locked and pinned snapshots stay).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/solver_types.h"

namespace ridge {

// The namespace of a request's cached prefixes: its cache salt, and its solver budget (a state
// solved to another tolerance or iteration cap is another state).
std::string PrefixCacheSpace(std::string_view salt, const SolverOptions& solver);

struct CachedSnapshot {
  int64_t slot = -1;
  int64_t position = 0;              // tokens the state has consumed
  std::vector<int32_t> blocks = {};  // KV blocks of positions < position (last may be partial)
};

class PrefixCache {
 public:
  struct Node;

  PrefixCache();
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  struct Hit {
    Node* node = nullptr;  // null: nothing usable
    int64_t position = 0;
    const CachedSnapshot* snapshot = nullptr;
  };
  // The deepest snapshot in `space` whose tokens are a prefix of `tokens`, at most `limit` long.
  Hit Lookup(std::string_view space, std::span<const int32_t> tokens, int64_t limit) const;
  // The snapshot at exactly `tokens` in `space`, or null.
  Node* Find(std::string_view space, std::span<const int32_t> tokens) const;

  // Adds a snapshot at exactly `tokens` (non-empty; no snapshot there yet). The caller has
  // filled its slot and holds a reference to each of its blocks for the cache.
  Node* Insert(std::string_view space, std::span<const int32_t> tokens, CachedSnapshot snapshot,
               bool pinned);
  // Removes a node's snapshot and gives it back (its slot and block references are the
  // caller's to release); the node itself may be freed.
  CachedSnapshot Remove(Node* node);
  // The least recently used snapshot that is neither locked nor pinned, or null.
  Node* LeastRecentlyUsed() const;

  void Touch(Node* node);  // most recently used now
  // A locked snapshot is not offered for eviction (LeastRecentlyUsed) until unlocked.
  void Lock(Node* node);
  void Unlock(Node* node);
  // A pinned snapshot (a saved session's) is never offered for eviction either. Pins count:
  // two sessions may share one state, and it stays pinned until both let go.
  void Pin(Node* node);
  void Unpin(Node* node);
  static const CachedSnapshot& snapshot(const Node* node);
  static bool pinned(const Node* node);

  int64_t size() const { return static_cast<int64_t>(by_age_.size()); }
  // Snapshots neither locked nor pinned.
  int64_t evictable() const;
  // Calls `visit` with every block reference an evictable snapshot holds, or a pinned one.
  void ForEachEvictableBlock(const std::function<void(int32_t)>& visit) const;
  void ForEachPinnedBlock(const std::function<void(int32_t)>& visit) const;
  // Changes whenever a snapshot is added or removed (so a lookup can be reused until then).
  uint64_t generation() const { return generation_; }

 private:
  Node* Root(std::string_view space, bool create) const;
  void ForEachBlockOf(bool (*wanted)(const Node&), const std::function<void(int32_t)>& visit) const;
  void Prune(Node* node);

  mutable std::map<std::string, std::unique_ptr<Node>, std::less<>> roots_;
  std::set<std::pair<uint64_t, Node*>> by_age_;  // snapshot nodes, least recently used first
  uint64_t clock_ = 0;
  uint64_t generation_ = 0;
  int64_t locked_or_pinned_ = 0;
};

}  // namespace ridge
