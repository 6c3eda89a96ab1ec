// The KV cache's bookkeeping (the storage is the backend's): a pool of fixed-size blocks with
// reference counts, and a sequence's block table over it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/model_spec.h"

namespace ridge {

class KvBlockPool {
 public:
  explicit KvBlockPool(int64_t num_blocks);

  int64_t total() const { return static_cast<int64_t>(references_.size()); }
  int64_t free() const { return static_cast<int64_t>(free_.size()); }
  int64_t used() const { return total() - free(); }

  // A free block with one reference, or -1 when none is free.
  int32_t Take();
  // One more holder of a taken block (a shared prefix).
  void Retain(int32_t block);
  // Drops one reference; the block is free again at zero.
  void Release(int32_t block);
  // Holders of a block (0 when free).
  int32_t references(int32_t block) const { return references_[block]; }

 private:
  std::vector<int32_t> references_;
  std::vector<int32_t> free_;  // taken from the back
};

// One sequence's blocks: entry i holds positions [i * block_size, (i + 1) * block_size).
class BlockTable {
 public:
  std::span<const int32_t> entries() const { return entries_; }
  int64_t size() const { return static_cast<int64_t>(entries_.size()); }

  // Takes the blocks that positions < end need; false (and nothing taken) when the pool has too
  // few.
  bool Grow(const KvLayout& layout, int64_t end, KvBlockPool& pool);
  void Clear(KvBlockPool& pool);
  // Appends blocks another holder has (a shared prefix), taking a reference to each.
  void Share(std::span<const int32_t> blocks, KvBlockPool& pool);
  // Hands the first `keep` entries to the caller, who then holds their references, and
  // releases the rest; the table is empty afterwards.
  std::vector<int32_t> Surrender(int64_t keep, KvBlockPool& pool);

 private:
  std::vector<int32_t> entries_;
};

}  // namespace ridge
