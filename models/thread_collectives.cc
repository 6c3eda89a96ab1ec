#include "models/thread_collectives.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ridge {

class ThreadCollectives::Rank : public Collective {
 public:
  Rank(ThreadCollectives* group, int32_t rank) : group_(group), rank_(rank) {}

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return group_->size(); }

  absl::Status AllReduceSum(float* data, int64_t count) override {
    ThreadCollectives& g = *group_;
    const int32_t n = size();
    {
      std::lock_guard<std::mutex> lock(g.mutex_);
      g.buffers_[rank_] = data;
      g.counts_[rank_] = count;
    }
    // The last to arrive checks the sizes and makes room for the sum.
    if (absl::Status arrived = g.Arrive(rank_, [&] { g.CheckCounts("an all-reduce"); });
        !arrived.ok()) {
      return arrived;
    }
    // This rank adds up its share of the elements over every rank, in rank order.
    const int64_t first = count * rank_ / n, end = count * (rank_ + 1) / n;
    float* sum = g.sum_.data();
    std::copy(g.buffers_[0] + first, g.buffers_[0] + end, sum + first);
    for (int32_t r = 1; r < n; ++r) {
      const float* other = g.buffers_[r];
      for (int64_t i = first; i < end; ++i) sum[i] += other[i];
    }
    // Not cut short by a failure: a rank leaving early could free its buffer while others read it.
    g.Settle(rank_);
    std::copy_n(sum, count, data);
    // No third barrier: the next collective's first one waits for every rank's copy to end
    // before its last arrival resizes `sum_`.
    return absl::OkStatus();
  }

  absl::Status GatherColumns(const float* local, int64_t rows, int64_t first_column,
                             int64_t columns, float* full, int64_t full_columns) override {
    ThreadCollectives& g = *group_;
    if (first_column < 0 || columns < 0 || first_column + columns > full_columns) {
      const absl::Status bad = absl::InvalidArgumentError(
          absl::StrCat("rank ", rank_, ": columns [", first_column, ", ", first_column + columns,
                       ") do not fit in ", full_columns));
      g.Fail(bad);
      return bad;
    }
    {
      std::lock_guard<std::mutex> lock(g.mutex_);
      if (rank_ == 0) g.buffers_[0] = full;
      g.counts_[rank_] = rows;
    }
    if (absl::Status arrived = g.Arrive(rank_, [&] { g.CheckCounts("a gather"); }); !arrived.ok()) {
      return arrived;
    }
    float* out = g.buffers_[0];
    for (int64_t row = 0; row < rows; ++row) {
      std::copy_n(local + row * columns, columns, out + row * full_columns + first_column);
    }
    // Rank 0 reads (and may free) `full` only once every rank wrote its columns, failure or not.
    g.Settle(rank_);
    return absl::OkStatus();
  }

  void Abort(const absl::Status& why) override { group_->Fail(why); }

 private:
  ThreadCollectives* group_;
  int32_t rank_;
};

ThreadCollectives::ThreadCollectives(int32_t ranks, std::chrono::milliseconds timeout)
    : timeout_(timeout), arrived_(ranks, false), buffers_(ranks, nullptr), counts_(ranks, 0) {
  for (int32_t r = 0; r < ranks; ++r) ranks_.push_back(std::make_unique<Rank>(this, r));
}

ThreadCollectives::~ThreadCollectives() = default;

Collective& ThreadCollectives::rank(int32_t r) { return *ranks_[r]; }

absl::Status ThreadCollectives::failure() {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

void ThreadCollectives::Reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  failure_ = absl::OkStatus();
  waiting_ = 0;
  std::fill(arrived_.begin(), arrived_.end(), false);
}

void ThreadCollectives::Fail(const absl::Status& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_.ok()) failure_ = why;
  all_arrived_.notify_all();
}

void ThreadCollectives::CheckCounts(const char* what) {
  const int64_t first = counts_[0];
  for (int32_t r = 1; r < size(); ++r) {
    if (counts_[r] != first) {
      failure_ =
          absl::InternalError(absl::StrCat("the ranks entered ", what, " with different sizes (",
                                           absl::StrJoin(counts_, ", "), ")"));
      return;
    }
  }
  if (sum_.size() < static_cast<size_t>(first)) sum_.resize(first);
}

void ThreadCollectives::ReleaseBarrier() {
  waiting_ = 0;
  std::fill(arrived_.begin(), arrived_.end(), false);
  ++generation_;
  all_arrived_.notify_all();
}

void ThreadCollectives::Settle(int32_t rank) {
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t generation = generation_;
  arrived_[rank] = true;
  if (++waiting_ == size()) {
    ReleaseBarrier();
    return;
  }
  all_arrived_.wait(lock, [&] { return generation_ != generation; });
}

absl::Status ThreadCollectives::Arrive(int32_t rank, const std::function<void()>& last) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!failure_.ok()) return failure_;
  const int64_t generation = generation_;
  arrived_[rank] = true;
  if (++waiting_ == size()) {
    if (last) last();
    if (!failure_.ok()) {
      all_arrived_.notify_all();
      return failure_;
    }
    ReleaseBarrier();
    return absl::OkStatus();
  }
  const bool released = all_arrived_.wait_for(
      lock, timeout_, [&] { return generation_ != generation || !failure_.ok(); });
  if (generation_ != generation) return absl::OkStatus();
  if (!released) {
    std::vector<int32_t> missing;
    for (int32_t r = 0; r < size(); ++r) {
      if (!arrived_[r]) missing.push_back(r);
    }
    failure_ = absl::DeadlineExceededError(
        absl::StrCat("rank ", rank, " waited ", timeout_.count(), " ms in a collective for rank",
                     missing.size() == 1 ? " " : "s ", absl::StrJoin(missing, ", ")));
    all_arrived_.notify_all();
  }
  return failure_;
}

}  // namespace ridge
