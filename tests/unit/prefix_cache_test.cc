// The prefix cache's index on its own: the deepest snapshot that begins a token sequence, within
// a limit and a namespace; edges split and folded back as snapshots come and go; least recently
// used first, never a locked or pinned snapshot; the blocks eviction would give back.
#include "engine/prefix_cache.h"

#include <gtest/gtest.h>

#include <vector>

namespace ridge {
namespace {

CachedSnapshot At(int64_t slot, int64_t position, std::vector<int32_t> blocks = {}) {
  return {.slot = slot, .position = position, .blocks = std::move(blocks)};
}

TEST(PrefixCacheTest, FindsTheDeepestSnapshotThatBeginsTheTokens) {
  PrefixCache cache;
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6};
  cache.Insert("s", std::span(a).first(2), At(10, 2), false);
  cache.Insert("s", std::span(a).first(5), At(11, 5), false);
  cache.Insert("s", std::vector<int32_t>{1, 2, 9}, At(12, 3), false);  // splits the edge at 2

  PrefixCache::Hit hit = cache.Lookup("s", a, 6);
  ASSERT_NE(hit.node, nullptr);
  EXPECT_EQ(hit.position, 5);
  EXPECT_EQ(hit.snapshot->slot, 11);
  // The limit keeps a token to compute: at most 4 of them may come from the cache.
  EXPECT_EQ(cache.Lookup("s", a, 4).position, 2);
  EXPECT_EQ(cache.Lookup("s", a, 1).node, nullptr);
  EXPECT_EQ(cache.Lookup("s", std::vector<int32_t>{1, 2, 9, 9}, 4).snapshot->slot, 12);
  // A sequence that leaves an edge in its middle stops at the node above.
  EXPECT_EQ(cache.Lookup("s", std::vector<int32_t>{1, 2, 3, 7, 7, 7}, 6).position, 2);
  EXPECT_EQ(cache.Lookup("s", std::vector<int32_t>{2, 2, 3}, 3).node, nullptr);
  // Another namespace (another salt or solver budget) sees nothing.
  EXPECT_EQ(cache.Lookup("t", a, 6).node, nullptr);
  EXPECT_EQ(cache.Find("s", std::span(a).first(5)), hit.node);
  EXPECT_EQ(cache.Find("s", std::span(a).first(4)), nullptr);
  EXPECT_EQ(cache.size(), 3);
}

TEST(PrefixCacheTest, RemovingASnapshotKeepsTheOthersReachable) {
  PrefixCache cache;
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 7, 8}, c = {1, 2};
  PrefixCache::Node* na = cache.Insert("s", a, At(0, 4), false);
  PrefixCache::Node* nb = cache.Insert("s", b, At(1, 4), false);
  PrefixCache::Node* nc = cache.Insert("s", c, At(2, 2), false);  // the branch point itself
  const uint64_t before = cache.generation();
  EXPECT_EQ(cache.Remove(nc).slot, 2);
  EXPECT_NE(cache.generation(), before);
  EXPECT_EQ(cache.Lookup("s", a, 4).node, na);
  EXPECT_EQ(cache.Lookup("s", b, 4).node, nb);
  EXPECT_EQ(cache.Lookup("s", c, 2).node, nullptr);
  // With one branch left, the branch point folds into it; the other stays found.
  EXPECT_EQ(cache.Remove(na).slot, 0);
  EXPECT_EQ(cache.Lookup("s", b, 4).node, nb);
  EXPECT_EQ(cache.Lookup("s", std::vector<int32_t>{1, 2, 7, 8, 9}, 5).position, 4);
  cache.Remove(nb);
  EXPECT_EQ(cache.size(), 0);
  // Everything can be added again afterwards.
  cache.Insert("s", c, At(3, 2), false);
  EXPECT_EQ(cache.Lookup("s", a, 4).snapshot->slot, 3);
}

TEST(PrefixCacheTest, EvictsLeastRecentlyUsedButNeverLockedOrPinned) {
  PrefixCache cache;
  PrefixCache::Node* first = cache.Insert("s", std::vector<int32_t>{1}, At(0, 1, {7}), false);
  PrefixCache::Node* second = cache.Insert("s", std::vector<int32_t>{2}, At(1, 1, {8}), false);
  PrefixCache::Node* pinned = cache.Insert("s", std::vector<int32_t>{3}, At(2, 1, {9}), true);
  EXPECT_EQ(cache.LeastRecentlyUsed(), first);
  cache.Touch(first);
  EXPECT_EQ(cache.LeastRecentlyUsed(), second);
  cache.Lock(second);
  EXPECT_EQ(cache.LeastRecentlyUsed(), first);
  EXPECT_EQ(cache.evictable(), 1);
  std::vector<int32_t> blocks;
  cache.ForEachEvictableBlock([&](int32_t b) { blocks.push_back(b); });
  EXPECT_EQ(blocks, std::vector<int32_t>{7});
  cache.Lock(first);
  EXPECT_EQ(cache.LeastRecentlyUsed(), nullptr);  // the pinned one is never offered
  cache.Unlock(first);
  cache.Unlock(second);
  EXPECT_EQ(cache.evictable(), 2);
  cache.Remove(cache.LeastRecentlyUsed());
  cache.Remove(cache.LeastRecentlyUsed());
  EXPECT_EQ(cache.LeastRecentlyUsed(), nullptr);
  EXPECT_EQ(cache.size(), 1);
  EXPECT_TRUE(PrefixCache::pinned(pinned));
  EXPECT_EQ(cache.Remove(pinned).blocks, std::vector<int32_t>{9});
}

TEST(PrefixCacheTest, TheNamespaceHoldsTheSaltAndTheSolverBudget) {
  const SolverOptions exact{0.0f, 30}, loose{1e-3f, 30}, short_cap{0.0f, 10};
  EXPECT_NE(PrefixCacheSpace("", exact), PrefixCacheSpace("", loose));
  EXPECT_NE(PrefixCacheSpace("", exact), PrefixCacheSpace("", short_cap));
  EXPECT_NE(PrefixCacheSpace("a", exact), PrefixCacheSpace("b", exact));
  EXPECT_EQ(PrefixCacheSpace("a", exact), PrefixCacheSpace("a", SolverOptions{0.0f, 30}));
  // A salt cannot spell another budget: "1/..." in a salt stays after the budget.
  EXPECT_NE(PrefixCacheSpace("0/30/", exact), PrefixCacheSpace("", exact));
}

}  // namespace
}  // namespace ridge
