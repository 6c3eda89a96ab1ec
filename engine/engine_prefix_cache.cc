// The engine's side of the prefix cache: hits looked up for the requests that may be admitted,
// restored on admission, and snapshots taken when a prompt is done and when a request ends.
#include <algorithm>
#include <cstring>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "engine/engine.h"
#include "engine/engine_sequence.h"

namespace ridge {

std::string PrefixCacheSpace(std::string_view salt, const SolverOptions& solver) {
  uint32_t tolerance_bits = 0;
  static_assert(sizeof(tolerance_bits) == sizeof(solver.tolerance));
  std::memcpy(&tolerance_bits, &solver.tolerance, sizeof(tolerance_bits));
  // The salt comes last, so no salt can spell another salt's budget.
  return absl::StrCat(tolerance_bits, "/", solver.max_iterations, "/", std::string(salt));
}

void Engine::FindCachedPrefixes() {
  if (!memory_.caching()) return;
  const int64_t candidates =
      std::min<int64_t>(static_cast<int64_t>(waiting_.size()), memory_.FreeRunningSlots());
  for (int64_t i = 0; i < candidates; ++i) {
    Sequence& seq = *waiting_[i];
    if (seq.request.prompt_logprobs >= 0) continue;  // every prompt token is computed and scored
    if (seq.session_node != nullptr) {
      // A session's state, pinned: the request continues it whatever its own namespace.
      const CachedSnapshot& snapshot = PrefixCache::snapshot(seq.session_node);
      seq.hit = {seq.session_node, snapshot.position, &snapshot};
      seq.hit_generation = memory_.generation();
    } else if (seq.hit_generation != memory_.generation()) {
      // At least the prompt's last token is computed: its logits pick the first new token.
      seq.hit =
          memory_.Lookup(seq.cache_space, seq.feed, static_cast<int64_t>(seq.feed.size()) - 1);
      seq.hit_generation = memory_.generation();
    }
  }
}

void Engine::LockAdmittedHits(size_t admitted) {
  // Only the admitted requests' hits: a waiting request's locked hit would keep its blocks from
  // the plan (they are not counted as free) while it never gets admitted, and requests could
  // then wait on each other's hits for ever. Nothing has been evicted since the lookups.
  for (size_t i = 0; i < admitted && i < waiting_.size(); ++i) {
    Sequence& seq = *waiting_[i];
    if (seq.hit.node == nullptr) continue;
    if (seq.hit_generation != memory_.generation()) {
      seq.hit = {};
      continue;
    }
    memory_.Lock(seq.hit.node);
    locked_hits_.push_back(seq.hit.node);
  }
}

void Engine::UnlockHits() {
  for (PrefixCache::Node* node : locked_hits_) memory_.Unlock(node);
  locked_hits_.clear();
}

absl::Status Engine::StartSequence(Sequence& seq, StepReport& report) {
  const PrefixCache::Hit hit = std::exchange(seq.hit, {});
  seq.hit_generation = ~uint64_t{0};
  const bool first_admission = seq.usage.queue_seconds == 0.0;
  if (memory_.caching()) report.prefix_queried_tokens += static_cast<int64_t>(seq.feed.size());
  if (hit.node != nullptr) {
    ASSIGN_OR_RETURN(const bool restored, memory_.Restore(hit, seq.memory));
    if (restored) {
      seq.position = seq.prompt_done = hit.position;
      report.prefix_hit_tokens += hit.position;
      if (first_admission) seq.usage.cached_tokens = hit.position;
      return absl::OkStatus();
    }
  }
  return backend_->ResetSlot(seq.memory.slot);
}

int64_t Engine::TokensToNextSnapshot(const Sequence& seq) const {
  const int64_t left = static_cast<int64_t>(seq.feed.size()) - seq.prompt_done;
  if (!memory_.caching()) return left;
  const std::vector<int64_t>& points = seq.request.snapshot_points;
  const auto next = std::upper_bound(points.begin(), points.end(), seq.prompt_done);
  return next == points.end() ? left : std::min(left, *next - seq.prompt_done);
}

bool Engine::AtSnapshotPoint(const Sequence& seq) const {
  const std::vector<int64_t>& points = seq.request.snapshot_points;
  return memory_.caching() && std::binary_search(points.begin(), points.end(), seq.prompt_done);
}

void Engine::SnapshotPrompt(Sequence& seq) {
  if (!memory_.caching()) return;
  const std::span<const int32_t> history = std::span<const int32_t>(seq.feed).first(seq.position);
  if (const absl::Status kept = memory_.Snapshot(seq.cache_space, history, seq.memory);
      !kept.ok()) {
    Log(LogLevel::kWarning, "request ", seq.id,
        ": the prefix cache could not keep its prompt's state: ", kept.ToString());
  }
}

void Engine::ReleaseFinished(Sequence& seq, FinishReason reason) {
  const bool ended_normally = reason == FinishReason::kStop || reason == FinishReason::kEos ||
                              reason == FinishReason::kLength;
  if (seq.joined_session) {
    LeaveSession(seq, ended_normally);  // keeps the memory as the session's when it can
    memory_.Release(seq.memory);
    return;
  }
  if (!ended_normally || !memory_.caching() || seq.memory.slot < 0) {
    memory_.Release(seq.memory);
    return;
  }
  // The state holds the prompt and the generated tokens it has consumed (the last one picked
  // may not have been fed).
  std::vector<int32_t> history = seq.history();
  if (seq.position > static_cast<int64_t>(history.size())) {
    memory_.Release(seq.memory);
    return;
  }
  history.resize(seq.position);
  memory_.Retire(seq.cache_space, history, seq.memory);
}

}  // namespace ridge
