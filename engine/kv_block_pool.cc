#include "engine/kv_block_pool.h"

#include <algorithm>
#include <utility>

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
  return true;
}

void BlockTable::Clear(KvBlockPool& pool) {
  for (int32_t block : entries_) pool.Release(block);
  entries_.clear();
}

void BlockTable::Share(std::span<const int32_t> blocks, KvBlockPool& pool) {
  for (int32_t block : blocks) {
    pool.Retain(block);
    entries_.push_back(block);
  }
}

std::vector<int32_t> BlockTable::Surrender(int64_t keep, KvBlockPool& pool) {
  keep = std::clamp<int64_t>(keep, 0, size());
  for (int64_t i = keep; i < size(); ++i) pool.Release(entries_[i]);
  entries_.resize(keep);
  return std::exchange(entries_, {});
}

}  // namespace ridge
