// Collectives between ranks that are threads of one process and share its memory (the CPU's
// tensor-parallel backend). Each collective is two barriers: the ranks publish their buffers,
// each rank does its share of the work reading the others' buffers, and they wait for each other
// (whatever fails meanwhile) before any buffer is reused or freed. A rank that waits longer than
// the time-out fails the collective for all, naming the ranks that did not arrive; Abort does the
// same at once. After a failure every collective fails until Reset, which the group's owner calls
// once no rank is inside a collective.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "models/collective.h"

namespace ridge {

class ThreadCollectives {
 public:
  ThreadCollectives(int32_t ranks, std::chrono::milliseconds timeout);
  ~ThreadCollectives();
  ThreadCollectives(const ThreadCollectives&) = delete;
  ThreadCollectives& operator=(const ThreadCollectives&) = delete;

  int32_t size() const { return static_cast<int32_t>(ranks_.size()); }
  Collective& rank(int32_t r);

  // The first failure since the last Reset (OK if none).
  absl::Status failure();
  // Clears a failure. Only when no rank is inside a collective.
  void Reset();

 private:
  class Rank;
  friend class Rank;

  // Waits until every rank arrived at this barrier; an error if the group failed or the wait
  // passed the time-out (which fails the group). The last rank to arrive runs `last` (under the
  // lock) before it releases the others.
  absl::Status Arrive(int32_t rank, const std::function<void()>& last = nullptr);
  // The barrier after the ranks read each other's buffers: every rank that passed the
  // collective's first barrier reaches it after a bounded copy, so it waits for all of them
  // whatever fails meanwhile (a rank leaving early could free a buffer another still reads).
  void Settle(int32_t rank);
  // Under the lock, by the last rank to arrive: lets every waiting rank through and readies the
  // next barrier.
  void ReleaseBarrier();
  void Fail(const absl::Status& why);
  // Under the lock: fails the group unless every rank published the same count, else makes
  // `sum_` hold that many.
  void CheckCounts(const char* what);

  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable all_arrived_;
  int64_t generation_ = 0;
  std::vector<bool> arrived_;
  int32_t waiting_ = 0;
  absl::Status failure_;
  // What the ranks published for the collective under way.
  std::vector<float*> buffers_;  // the all-reduce's data; rank 0's `full` for a gather
  std::vector<int64_t> counts_;  // the all-reduce's count, the gather's rows
  std::vector<float> sum_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

}  // namespace ridge
