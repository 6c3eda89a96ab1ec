#include "engine/kv_block_pool.h"

#include <algorithm>

#include "base/check.h"

namespace ridge {

KvBlockPool::KvBlockPool(int64_t num_blocks) : references_(num_blocks, 0) {
  free_.reserve(num_blocks);
  for (int64_t i = num_blocks - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

int32_t KvBlockPool::Take() {
  if (free_.empty()) return -1;
  const int32_t block = free_.back();
  free_.pop_back();
  references_[block] = 1;
  return block;
}

void KvBlockPool::Retain(int32_t block) {
  RIDGE_CHECK(block >= 0 && block < total() && references_[block] > 0);
  ++references_[block];
}

void KvBlockPool::Release(int32_t block) {
  RIDGE_CHECK(block >= 0 && block < total() && references_[block] > 0);
  if (--references_[block] == 0) free_.push_back(block);
}

bool BlockTable::Grow(const KvLayout& layout, int64_t end, KvBlockPool& pool) {
  if (layout.empty() || end <= 0) return true;
  const int64_t needed = (end - 1) / layout.block_size + 1 - size();
  if (needed <= 0) return true;
  if (needed > pool.free()) return false;
  for (int64_t i = 0; i < needed; ++i) entries_.push_back(pool.Take());
  live_ += needed;
  return true;
}

void BlockTable::Trim(const KvLayout& layout, int64_t next_position, KvBlockPool& pool) {
  if (layout.empty() || layout.shared_window == 0) return;
  const int64_t first_seen = next_position - layout.shared_window + 1;
  if (first_seen <= 0) return;
  const int64_t before = std::min<int64_t>(first_seen / layout.block_size, size());
  for (; first_live_ < before; ++first_live_) {
    pool.Release(entries_[first_live_]);
    entries_[first_live_] = -1;
    --live_;
  }
}

void BlockTable::Clear(KvBlockPool& pool) {
  for (int32_t block : entries_) {
    if (block >= 0) pool.Release(block);
  }
  entries_.clear();
  live_ = 0;
  first_live_ = 0;
}

}  // namespace ridge
