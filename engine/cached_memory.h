// The engine's memory with its prefix cache: the running sequences' state slots and KV blocks
// (HybridMemory) and the snapshots the cache keeps in the same pools. The slot pool holds
// `running_slots` states for sequences and `snapshot_slots` more for snapshots, so neither waits
// for the other's slots. KV blocks are shared: a snapshot holds references to the blocks of the
// positions it covers, and when a sequence needs a block that is not free, snapshots are evicted,
// least recently used first, until it is. A hit copies the snapshot's state into the sequence's
// slot and shares its blocks; the partly filled last block is copied, since the sequence writes
// into it.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/hybrid_memory.h"
#include "engine/prefix_cache.h"
#include "models/model_backend.h"

namespace ridge {

class CachedMemory {
 public:
  // `backend` must have running_slots + snapshot_slots slots; snapshot_slots 0: no cache.
  CachedMemory(ModelBackend* backend, int64_t running_slots, int64_t snapshot_slots);

  const HybridMemory& pools() const { return memory_; }
  const KvLayout& layout() const { return memory_.layout(); }
  bool caching() const { return snapshot_slots_ > 0; }
  int64_t snapshot_slots() const { return snapshot_slots_; }
  int64_t snapshots() const { return cache_.size(); }
  int64_t evictions() const { return evictions_; }  // since the start

  // Slots free for sequences.
  int64_t FreeRunningSlots() const { return running_slots_ - running_; }
  // Blocks free now plus those that evicting every snapshot not locked or pinned would free.
  int64_t FreeBlocks();

  // Takes a slot for a sequence; false when all of the sequences' slots are held.
  bool TakeSlot(SequenceMemory& memory);
  // Blocks so positions < end are covered, evicting snapshots as needed; false (nothing taken)
  // when even that leaves too few.
  bool Grow(SequenceMemory& memory, int64_t end);
  void Release(SequenceMemory& memory);

  // The deepest snapshot in `space` whose tokens begin `tokens`, at most `limit` of them.
  PrefixCache::Hit Lookup(std::string_view space, std::span<const int32_t> tokens,
                          int64_t limit) const {
    return cache_.Lookup(space, tokens, limit);
  }
  uint64_t generation() const { return cache_.generation(); }
  void Lock(PrefixCache::Node* node) { cache_.Lock(node); }
  void Unlock(PrefixCache::Node* node) { cache_.Unlock(node); }

  // Starts `memory` (a slot, no blocks) from a locked hit: the snapshot's state and position,
  // its full blocks shared and its partly filled last one copied. False, with `memory` holding
  // its slot and no blocks, when no block is left for that copy (the caller then starts the
  // sequence from scratch).
  absl::StatusOr<bool> Restore(const PrefixCache::Hit& hit, SequenceMemory& memory);
  // Keeps a copy of the state `memory` holds after `tokens` (its whole history) unless the cache
  // has one there already; makes room by evicting the least recently used snapshot. Keeps
  // nothing when every snapshot is locked or pinned.
  absl::Status Snapshot(std::string_view space, std::span<const int32_t> tokens,
                        const SequenceMemory& memory);
  // Like Snapshot for a sequence that is done: the cache takes over its slot and blocks
  // instead of copying them (or releases them when it has that snapshot already or no room).
  void Retire(std::string_view space, std::span<const int32_t> tokens, SequenceMemory& memory);
  // Like Retire, but the snapshot is pinned once more (for a saved session) and returned; null
  // (memory released) when there is no room.
  PrefixCache::Node* RetirePinned(std::string_view space, std::span<const int32_t> tokens,
                                  SequenceMemory& memory);
  // A session's snapshot given up: it stays as an ordinary, evictable one.
  void Unpin(PrefixCache::Node* node) { cache_.Unpin(node); }
  void Pin(PrefixCache::Node* node) { cache_.Pin(node); }
  // Distinct KV blocks that pinned snapshots hold (never given back while pinned).
  int64_t PinnedBlocks();
  PrefixCache::Node* Find(std::string_view space, std::span<const int32_t> tokens) const {
    return cache_.Find(space, tokens);
  }

  // A pinned snapshot's contents as the backend stores them: its state and its KV blocks.
  absl::Status Export(const PrefixCache::Node* node, std::string* state,
                      std::vector<std::string>* kv_blocks);
  // A pinned snapshot at `tokens` made from exported contents (a session read from disk):
  // evicts for room; on any failure takes nothing and changes nothing else.
  absl::StatusOr<PrefixCache::Node*> Import(std::string_view space, std::span<const int32_t> tokens,
                                            std::string_view state,
                                            const std::vector<std::string>& kv_blocks);

 private:
  bool EvictOne();
  // Retire's work: the snapshot kept (pinned or not), or null when memory was released.
  PrefixCache::Node* Keep(std::string_view space, std::span<const int32_t> tokens,
                          SequenceMemory& memory, bool pinned);
  // Room for one more snapshot: evicts when the cache is full; false when it cannot.
  bool MakeRoom();

  ModelBackend* backend_;
  HybridMemory memory_;
  PrefixCache cache_;
  int64_t running_slots_;
  int64_t snapshot_slots_;
  int64_t running_ = 0;  // slots held by sequences
  int64_t evictions_ = 0;
  std::vector<int32_t> holds_;  // FreeBlocks' scratch: evictable references per block
};

}  // namespace ridge
