#include "tokenizer/word_cache.h"

#include "absl/hash/hash.h"

namespace ridge {

WordCache::Shard& WordCache::ShardFor(std::string_view word) const {
  return shards_[absl::HashOf(word) % kShards];
}

bool WordCache::Lookup(std::string_view word, std::vector<int32_t>* out) const {
  Shard& shard = ShardFor(word);
  absl::ReaderMutexLock lock(&shard.mu);
  auto it = shard.map.find(absl::string_view(word.data(), word.size()));
  if (it == shard.map.end()) return false;
  out->insert(out->end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::Insert(std::string_view word, const int32_t* ids, size_t count) {
  Shard& shard = ShardFor(word);
  absl::MutexLock lock(&shard.mu);
  if (shard.map.size() >= kMaxEntriesPerShard) shard.map.clear();
  shard.map.try_emplace(std::string(word), ids, ids + count);
}

}  // namespace ridge
