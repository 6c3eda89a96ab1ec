// The masks of the states used last, shared by the sequences that meet them: an output revisits
// few states (inside a string the state does not change from token to token), and a mask costs
// a walk of the vocabulary's trie. Thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "sampling/token_trie.h"

namespace ridge {

template <typename Key>
class MaskCache {
 public:
  // Masks kept at most: each takes vocabulary / 8 bytes (19 KB for 151,936 tokens).
  explicit MaskCache(size_t capacity) : capacity_(capacity) {}

  // The mask of `key`, from the cache or else made by `make()` (outside the lock) and kept in
  // place of the one used least recently.
  template <typename Make>
  std::shared_ptr<const TokenBits> Get(const Key& key, Make make) const {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (Entry& entry : entries_) {
        if (entry.key == key) {
          entry.last_use = ++uses_;
          return entry.bits;
        }
      }
    }
    std::shared_ptr<const TokenBits> bits = make();
    std::lock_guard<std::mutex> lock(mutex_);
    if (entries_.size() < capacity_) {
      entries_.push_back({key, bits, ++uses_});
    } else {
      auto oldest =
          std::min_element(entries_.begin(), entries_.end(),
                           [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
      *oldest = {key, bits, ++uses_};
    }
    return bits;
  }

 private:
  struct Entry {
    Key key;
    std::shared_ptr<const TokenBits> bits;
    uint64_t last_use = 0;
  };
  const size_t capacity_;
  mutable std::mutex mutex_;
  mutable std::vector<Entry> entries_;  // guarded by mutex_
  mutable uint64_t uses_ = 0;           // guarded by mutex_
};

}  // namespace ridge
