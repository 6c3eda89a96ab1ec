#include "engine/prefix_cache.h"

#include <algorithm>

#include "base/check.h"

namespace ridge {

struct PrefixCache::Node {
  Node* parent = nullptr;
  std::vector<int32_t> edge;                          // the tokens from the parent to this node
  int64_t depth = 0;                                  // tokens from the root to this node
  std::map<int32_t, std::unique_ptr<Node>> children;  // by the first token of their edge
  std::optional<CachedSnapshot> snapshot;
  int32_t pins = 0;   // sessions holding it
  int32_t locks = 0;  // requests about to restore it
  uint64_t last_used = 0;

  bool held() const { return pins > 0 || locks > 0; }
};

namespace {

// Tokens `edge` and `tokens` have in common at their start.
size_t CommonLength(std::span<const int32_t> edge, std::span<const int32_t> tokens) {
  const size_t n = std::min(edge.size(), tokens.size());
  size_t i = 0;
  while (i < n && edge[i] == tokens[i]) ++i;
  return i;
}

}  // namespace

PrefixCache::PrefixCache() = default;
PrefixCache::~PrefixCache() = default;

PrefixCache::Node* PrefixCache::Root(std::string_view space, bool create) const {
  auto it = roots_.find(space);
  if (it != roots_.end()) return it->second.get();
  if (!create) return nullptr;
  return roots_.emplace(std::string(space), std::make_unique<Node>()).first->second.get();
}

PrefixCache::Hit PrefixCache::Lookup(std::string_view space, std::span<const int32_t> tokens,
                                     int64_t limit) const {
  Hit best;
  const Node* node = Root(space, false);
  const int64_t length = static_cast<int64_t>(tokens.size());
  while (node != nullptr && node->depth <= limit) {
    if (node->snapshot.has_value()) {
      best = {const_cast<Node*>(node), node->depth, &*node->snapshot};
    }
    if (node->depth >= length) break;
    auto child = node->children.find(tokens[node->depth]);
    if (child == node->children.end()) break;
    const std::vector<int32_t>& edge = child->second->edge;
    if (CommonLength(edge, tokens.subspan(node->depth)) < edge.size()) break;
    node = child->second.get();
  }
  return best;
}

PrefixCache::Node* PrefixCache::Find(std::string_view space,
                                     std::span<const int32_t> tokens) const {
  const int64_t length = static_cast<int64_t>(tokens.size());
  const Hit hit = Lookup(space, tokens, length);
  return hit.position == length ? hit.node : nullptr;
}

PrefixCache::Node* PrefixCache::Insert(std::string_view space, std::span<const int32_t> tokens,
                                       CachedSnapshot snapshot, bool pinned) {
  RIDGE_CHECK(!tokens.empty());
  RIDGE_CHECK(snapshot.position == static_cast<int64_t>(tokens.size()));
  Node* node = Root(space, true);
  const int64_t length = static_cast<int64_t>(tokens.size());
  while (node->depth < length) {
    const std::span<const int32_t> rest = tokens.subspan(node->depth);
    auto it = node->children.find(rest[0]);
    if (it == node->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->parent = node;
      leaf->edge.assign(rest.begin(), rest.end());
      leaf->depth = length;
      node = (node->children[rest[0]] = std::move(leaf)).get();
      break;
    }
    Node* child = it->second.get();
    const size_t common = CommonLength(child->edge, rest);
    if (common == child->edge.size()) {
      node = child;
      continue;
    }
    // Split the edge: a new node at the end of the common part takes the child below it.
    auto middle = std::make_unique<Node>();
    middle->parent = node;
    middle->edge.assign(child->edge.begin(), child->edge.begin() + common);
    middle->depth = node->depth + static_cast<int64_t>(common);
    std::unique_ptr<Node> moved = std::move(it->second);
    moved->edge.erase(moved->edge.begin(), moved->edge.begin() + common);
    moved->parent = middle.get();
    middle->children[moved->edge[0]] = std::move(moved);
    node = (it->second = std::move(middle)).get();
  }
  RIDGE_CHECK(node->depth == length && !node->snapshot.has_value());
  node->snapshot = std::move(snapshot);
  node->pins = pinned ? 1 : 0;
  node->locks = 0;
  node->last_used = ++clock_;
  by_age_.emplace(node->last_used, node);
  if (pinned) ++locked_or_pinned_;
  ++generation_;
  return node;
}

CachedSnapshot PrefixCache::Remove(Node* node) {
  RIDGE_CHECK(node != nullptr && node->snapshot.has_value() && node->locks == 0);
  CachedSnapshot out = std::move(*node->snapshot);
  node->snapshot.reset();
  by_age_.erase({node->last_used, node});
  if (node->pins > 0) --locked_or_pinned_;
  node->pins = 0;
  ++generation_;
  Prune(node);
  return out;
}

void PrefixCache::Prune(Node* node) {
  // A node without a snapshot is kept only where it joins two or more branches.
  while (node->parent != nullptr && !node->snapshot.has_value()) {
    Node* parent = node->parent;
    const int32_t key = node->edge[0];
    if (node->children.empty()) {
      parent->children.erase(key);  // frees node
      node = parent;
      continue;
    }
    if (node->children.size() == 1) {
      // Fold the node into its only child, which keeps its identity (and its snapshot).
      std::unique_ptr<Node> child = std::move(node->children.begin()->second);
      child->edge.insert(child->edge.begin(), node->edge.begin(), node->edge.end());
      child->parent = parent;
      parent->children[key] = std::move(child);  // frees node
    }
    return;
  }
  // An empty namespace goes too, so salts that come and go leave nothing behind.
  if (node->parent == nullptr && node->children.empty() && !node->snapshot.has_value()) {
    std::erase_if(roots_, [&](const auto& root) { return root.second.get() == node; });
  }
}

PrefixCache::Node* PrefixCache::LeastRecentlyUsed() const {
  for (const auto& [age, node] : by_age_) {
    if (!node->held()) return node;
  }
  return nullptr;
}

void PrefixCache::Touch(Node* node) {
  RIDGE_CHECK(node->snapshot.has_value());
  by_age_.erase({node->last_used, node});
  node->last_used = ++clock_;
  by_age_.emplace(node->last_used, node);
}

void PrefixCache::Lock(Node* node) {
  RIDGE_CHECK(node->snapshot.has_value());
  if (!node->held()) ++locked_or_pinned_;
  ++node->locks;
}

void PrefixCache::Unlock(Node* node) {
  RIDGE_CHECK(node->locks > 0);
  --node->locks;
  if (!node->held()) --locked_or_pinned_;
}

void PrefixCache::Pin(Node* node) {
  RIDGE_CHECK(node->snapshot.has_value());
  if (!node->held()) ++locked_or_pinned_;
  ++node->pins;
}

void PrefixCache::Unpin(Node* node) {
  RIDGE_CHECK(node->pins > 0);
  --node->pins;
  if (!node->held()) --locked_or_pinned_;
}

const CachedSnapshot& PrefixCache::snapshot(const Node* node) { return *node->snapshot; }
bool PrefixCache::pinned(const Node* node) { return node->pins > 0; }

int64_t PrefixCache::evictable() const { return size() - locked_or_pinned_; }

void PrefixCache::ForEachBlockOf(bool (*wanted)(const Node&),
                                 const std::function<void(int32_t)>& visit) const {
  for (const auto& [age, node] : by_age_) {
    if (!wanted(*node)) continue;
    for (int32_t block : node->snapshot->blocks) visit(block);
  }
}

void PrefixCache::ForEachEvictableBlock(const std::function<void(int32_t)>& visit) const {
  ForEachBlockOf([](const Node& node) { return !node.held(); }, visit);
}

void PrefixCache::ForEachPinnedBlock(const std::function<void(int32_t)>& visit) const {
  ForEachBlockOf([](const Node& node) { return node.pins > 0; }, visit);
}

}  // namespace ridge
