#include "engine/cached_memory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/status_macros.h"

namespace ridge {

CachedMemory::CachedMemory(ModelBackend* backend, int64_t running_slots, int64_t snapshot_slots)
    : backend_(backend),
      memory_(running_slots + snapshot_slots, backend->kv_layout(), backend->num_kv_blocks()),
      running_slots_(running_slots),
      snapshot_slots_(snapshot_slots) {
  RIDGE_CHECK(running_slots >= 1 && snapshot_slots >= 0);
}

int64_t CachedMemory::FreeBlocks() {
  const KvBlockPool& pool = memory_.blocks();
  int64_t free = pool.free();
  if (cache_.evictable() == 0) return free;
  holds_.assign(pool.total(), 0);
  cache_.ForEachEvictableBlock([&](int32_t block) {
    // A block is freed by the evictions once they have dropped every reference it has.
    if (++holds_[block] == pool.references(block)) ++free;
  });
  return free;
}

int64_t CachedMemory::PinnedBlocks() {
  int64_t pinned = 0;
  holds_.assign(memory_.blocks().total(), 0);
  cache_.ForEachPinnedBlock([&](int32_t block) {
    if (holds_[block]++ == 0) ++pinned;
  });
  return pinned;
}

bool CachedMemory::TakeSlot(SequenceMemory& memory) {
  if (running_ >= running_slots_) return false;
  // The pool has a slot for every sequence beside a full cache.
  RIDGE_CHECK(memory_.TakeSlot(memory));
  ++running_;
  return true;
}

bool CachedMemory::Grow(SequenceMemory& memory, int64_t end) {
  while (!memory_.Grow(memory, end)) {
    if (!EvictOne()) return false;
  }
  return true;
}

void CachedMemory::Release(SequenceMemory& memory) {
  if (memory.slot >= 0) --running_;
  memory_.Release(memory);
}

bool CachedMemory::EvictOne() {
  PrefixCache::Node* victim = cache_.LeastRecentlyUsed();
  if (victim == nullptr) return false;
  CachedSnapshot evicted = cache_.Remove(victim);
  memory_.mutable_slots().Release(evicted.slot);
  for (int32_t block : evicted.blocks) memory_.mutable_blocks().Release(block);
  ++evictions_;
  return true;
}

bool CachedMemory::MakeRoom() { return cache_.size() < snapshot_slots_ || EvictOne(); }

absl::StatusOr<bool> CachedMemory::Restore(const PrefixCache::Hit& hit, SequenceMemory& memory) {
  RIDGE_CHECK(hit.node != nullptr && memory.slot >= 0 && memory.blocks.size() == 0);
  const CachedSnapshot& snapshot = *hit.snapshot;
  const KvLayout& kv = memory_.layout();
  if (!kv.empty()) {
    const int64_t full = snapshot.position / kv.block_size;
    memory.blocks.Share(std::span<const int32_t>(snapshot.blocks).first(full),
                        memory_.mutable_blocks());
    if (full < static_cast<int64_t>(snapshot.blocks.size())) {
      if (!Grow(memory, snapshot.position)) {
        memory.blocks.Clear(memory_.mutable_blocks());
        return false;
      }
      RETURN_IF_ERROR(backend_->CopyKvBlock(snapshot.blocks[full], memory.blocks.entries()[full]));
    }
  }
  RETURN_IF_ERROR(backend_->CopySlot(snapshot.slot, memory.slot));
  cache_.Touch(hit.node);
  return true;
}

absl::Status CachedMemory::Snapshot(std::string_view space, std::span<const int32_t> tokens,
                                    const SequenceMemory& memory) {
  if (!caching() || tokens.empty()) return absl::OkStatus();
  if (PrefixCache::Node* existing = cache_.Find(space, tokens); existing != nullptr) {
    cache_.Touch(existing);
    return absl::OkStatus();
  }
  if (!MakeRoom()) return absl::OkStatus();
  CachedSnapshot snapshot{.slot = memory_.mutable_slots().Take(),
                          .position = static_cast<int64_t>(tokens.size())};
  RIDGE_CHECK(snapshot.slot >= 0);
  if (absl::Status copied = backend_->CopySlot(memory.slot, snapshot.slot); !copied.ok()) {
    memory_.mutable_slots().Release(snapshot.slot);
    return copied;
  }
  const int64_t covered = memory_.layout().BlocksFor(snapshot.position);
  RIDGE_CHECK(covered <= memory.blocks.size());
  for (int64_t i = 0; i < covered; ++i) {
    const int32_t block = memory.blocks.entries()[i];
    memory_.mutable_blocks().Retain(block);
    snapshot.blocks.push_back(block);
  }
  cache_.Insert(space, tokens, std::move(snapshot), /*pinned=*/false);
  return absl::OkStatus();
}

void CachedMemory::Retire(std::string_view space, std::span<const int32_t> tokens,
                          SequenceMemory& memory) {
  Keep(space, tokens, memory, /*pinned=*/false);
}

PrefixCache::Node* CachedMemory::RetirePinned(std::string_view space,
                                              std::span<const int32_t> tokens,
                                              SequenceMemory& memory) {
  return Keep(space, tokens, memory, /*pinned=*/true);
}

PrefixCache::Node* CachedMemory::Keep(std::string_view space, std::span<const int32_t> tokens,
                                      SequenceMemory& memory, bool pinned) {
  const int64_t position = static_cast<int64_t>(tokens.size());
  const bool keep = caching() && memory.slot >= 0 && position > 0 &&
                    backend_->SlotPosition(memory.slot) == position &&
                    memory.blocks.size() >= memory_.layout().BlocksFor(position);
  if (!keep) {
    Release(memory);
    return nullptr;
  }
  if (PrefixCache::Node* existing = cache_.Find(space, tokens); existing != nullptr) {
    cache_.Touch(existing);
    if (pinned) cache_.Pin(existing);
    Release(memory);
    return existing;
  }
  if (!MakeRoom()) {
    Release(memory);
    return nullptr;
  }
  CachedSnapshot snapshot{.slot = std::exchange(memory.slot, -1), .position = position};
  --running_;
  snapshot.blocks =
      memory.blocks.Surrender(memory_.layout().BlocksFor(position), memory_.mutable_blocks());
  return cache_.Insert(space, tokens, std::move(snapshot), pinned);
}

absl::Status CachedMemory::Export(const PrefixCache::Node* node, std::string* state,
                                  std::vector<std::string>* kv_blocks) {
  const CachedSnapshot& snapshot = PrefixCache::snapshot(node);
  RETURN_IF_ERROR(backend_->ExportSlot(snapshot.slot, state));
  kv_blocks->resize(snapshot.blocks.size());
  for (size_t i = 0; i < snapshot.blocks.size(); ++i) {
    RETURN_IF_ERROR(backend_->ExportKvBlock(snapshot.blocks[i], &(*kv_blocks)[i]));
  }
  return absl::OkStatus();
}

absl::StatusOr<PrefixCache::Node*> CachedMemory::Import(std::string_view space,
                                                        std::span<const int32_t> tokens,
                                                        std::string_view state,
                                                        const std::vector<std::string>& kv_blocks) {
  const int64_t position = static_cast<int64_t>(tokens.size());
  RIDGE_CHECK(position > 0 &&
              static_cast<int64_t>(kv_blocks.size()) == memory_.layout().BlocksFor(position));
  if (cache_.Find(space, tokens) != nullptr) {
    return absl::AlreadyExistsError(
        "the prefix cache already holds a state at exactly these tokens");
  }
  if (!MakeRoom()) {
    return absl::ResourceExhaustedError(
        "the prefix cache has no room: every state it holds is a session or in use");
  }
  // A sequence's memory for the while, so failures give everything back the usual way.
  SequenceMemory memory;
  memory.slot = memory_.mutable_slots().Take();
  RIDGE_CHECK(memory.slot >= 0);
  ++running_;
  auto fail = [&](absl::Status status) {
    Release(memory);
    return status;
  };
  if (!kv_blocks.empty() && !Grow(memory, position)) {
    return fail(absl::ResourceExhaustedError(
        absl::StrCat("the KV cache has no room for the session's ", kv_blocks.size(), " blocks")));
  }
  if (absl::Status s = backend_->ImportSlot(memory.slot, state, position); !s.ok()) return fail(s);
  for (size_t i = 0; i < kv_blocks.size(); ++i) {
    if (absl::Status s = backend_->ImportKvBlock(memory.blocks.entries()[i], kv_blocks[i]);
        !s.ok()) {
      return fail(s);
    }
  }
  PrefixCache::Node* node = Keep(space, tokens, memory, /*pinned=*/true);
  RIDGE_CHECK(node != nullptr);
  return node;
}

}  // namespace ridge
