// A bounded, thread-safe cache from pre-tokenized word to its BPE ids. Text repeats words
// heavily, so most words skip the merge loop. Sharded so that the server's encoding threads
// rarely wait on one another.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace ridge {

class WordCache {
 public:
  // Appends the cached ids of `word` to `out` and returns true, or returns false.
  bool Lookup(std::string_view word, std::vector<int32_t>* out) const;
  void Insert(std::string_view word, const int32_t* ids, size_t count);

 private:
  static constexpr int kShards = 16;
  // A full shard is cleared rather than evicted entry by entry: simple, and the working set of
  // frequent words refills it at once.
  static constexpr size_t kMaxEntriesPerShard = 8192;
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> map;
  };
  Shard& ShardFor(std::string_view word) const;
  mutable std::array<Shard, kShards> shards_;
};

}  // namespace ridge
