#include "models/tensor_parallel_backend.h"

#include <omp.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "models/thread_collectives.h"

namespace ridge {

// Threads for ranks 1..N-1 that wait for a job, and rank 0 on the caller's thread. Each rank's
// OpenMP regions take an N-th of the cores. A watchdog thread calls the step's on_timeout, once,
// with the ranks still running when a step passes its time-out.
class TensorParallelBackend::RankThreads {
 public:
  using OnTimeout = std::function<void(const std::vector<int32_t>& running)>;

  explicit RankThreads(int32_t ranks)
      : ranks_(ranks),
        threads_per_rank_(std::max(1, omp_get_max_threads() / ranks)),
        finished_(ranks, true) {
    for (int32_t r = 1; r < ranks; ++r) workers_.emplace_back([this, r] { Loop(r); });
    watchdog_ = std::thread([this] { Watch(); });
  }

  ~RankThreads() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    watch_.notify_all();
    for (std::thread& t : workers_) t.join();
    watchdog_.join();
  }

  // Runs job(r) for every rank at once; returns when every rank is done. If they are not all
  // done `timeout` after the start (0: never), on_timeout runs on the watchdog's thread, and Run
  // still waits for every rank (and for on_timeout) before it returns.
  void Run(const std::function<void(int32_t)>& job, std::chrono::milliseconds timeout,
           const OnTimeout& on_timeout) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      pending_ = ranks_ - 1;
      std::fill(finished_.begin(), finished_.end(), false);
      ++generation_;
      if (timeout.count() > 0) {
        deadline_ = std::chrono::steady_clock::now() + timeout;
        on_timeout_ = &on_timeout;
      }
    }
    wake_.notify_all();
    watch_.notify_all();
    const int caller_threads = omp_get_max_threads();
    omp_set_num_threads(threads_per_rank_);
    job(0);
    omp_set_num_threads(caller_threads);
    std::unique_lock<std::mutex> lock(mutex_);
    finished_[0] = true;
    done_.wait(lock, [&] { return pending_ == 0 && !firing_; });
    job_ = nullptr;
    on_timeout_ = nullptr;  // the watchdog stands down
    watch_.notify_all();
  }

 private:
  void Loop(int32_t rank) {
    omp_set_num_threads(threads_per_rank_);
    int64_t seen = 0;
    for (;;) {
      const std::function<void(int32_t)>* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      (*job)(rank);
      std::lock_guard<std::mutex> lock(mutex_);
      finished_[rank] = true;
      if (--pending_ == 0) done_.notify_all();
    }
  }

  void Watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      watch_.wait(lock, [&] { return stop_ || on_timeout_ != nullptr; });
      if (stop_) return;
      const int64_t step = generation_;
      const bool stood_down = watch_.wait_until(
          lock, deadline_, [&] { return stop_ || on_timeout_ == nullptr || generation_ != step; });
      if (stop_) return;
      std::vector<int32_t> running;
      for (int32_t r = 0; !stood_down && r < ranks_; ++r) {
        if (!finished_[r]) running.push_back(r);
      }
      // Every rank done just as the time ran out: the step succeeded, nothing to abort.
      if (!running.empty()) {
        const OnTimeout* fire = on_timeout_;
        firing_ = true;
        lock.unlock();
        (*fire)(running);
        lock.lock();
        firing_ = false;
        done_.notify_all();
      }
      watch_.wait(lock, [&] { return stop_ || on_timeout_ == nullptr || generation_ != step; });
    }
  }

  const int32_t ranks_;
  const int threads_per_rank_;
  std::mutex mutex_;
  std::condition_variable wake_, done_, watch_;
  const std::function<void(int32_t)>* job_ = nullptr;
  int64_t generation_ = 0;
  int32_t pending_ = 0;
  std::vector<bool> finished_;
  std::chrono::steady_clock::time_point deadline_;
  const OnTimeout* on_timeout_ = nullptr;  // set while a step with a time-out runs
  bool firing_ = false;                    // on_timeout is running
  bool stop_ = false;
  std::vector<std::thread> workers_;
  std::thread watchdog_;
};

struct TensorParallelBackend::RankChunks {
  RankChunks(std::span<const SlotChunk> chunks, int32_t ranks)
      : original(chunks),
        chunks(ranks, {chunks.begin(), chunks.end()}),
        stats(ranks, std::vector<SolverStats>(chunks.size())) {
    for (int32_t r = 0; r < ranks; ++r) {
      for (size_t i = 0; i < chunks.size(); ++i) {
        if (chunks[i].stats != nullptr) this->chunks[r][i].stats = &stats[r][i];
      }
    }
  }

  void MergeStats() const {
    for (size_t i = 0; i < original.size(); ++i) {
      if (original[i].stats == nullptr) continue;
      for (const std::vector<SolverStats>& rank : stats) original[i].stats->Merge(rank[i]);
    }
  }

  std::span<const SlotChunk> original;
  std::vector<std::vector<SlotChunk>> chunks;
  std::vector<std::vector<SolverStats>> stats;
};

TensorParallelBackend::TensorParallelBackend(ModelSpec spec,
                                             std::unique_ptr<ThreadCollectives> group,
                                             std::chrono::milliseconds step_timeout)
    : spec_(std::move(spec)), group_(std::move(group)), step_timeout_(step_timeout) {}

TensorParallelBackend::~TensorParallelBackend() = default;

absl::Status TensorParallelBackend::SetRanks(std::vector<Rank> ranks) {
  if (ranks.empty()) return absl::InvalidArgumentError("tensor parallelism needs a rank");
  const ModelBackend& first = *ranks[0].backend;
  kv_ = PlanKvLayout(spec_, first.kv_layout().block_size);
  kv_.floats_per_token = 0;
  kv_.element_bytes = first.kv_layout().element_bytes;
  state_bytes_per_slot_ = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const ModelBackend& b = *ranks[r].backend;
    if (b.num_slots() != first.num_slots() || b.num_kv_blocks() != first.num_kv_blocks() ||
        b.kv_layout().block_size != first.kv_layout().block_size ||
        b.kv_layout().element_bytes != kv_.element_bytes) {
      return absl::InternalError(absl::StrCat(
          "rank ", r, " has ", b.num_slots(), " slots and ", b.num_kv_blocks(), " KV blocks of ",
          b.kv_layout().block_size, " tokens; rank 0 has ", first.num_slots(), " and ",
          first.num_kv_blocks(), " of ", first.kv_layout().block_size));
    }
    state_bytes_per_slot_ += b.state_bytes_per_slot();
    kv_.floats_per_token += b.kv_layout().floats_per_token;
  }
  ranks_ = std::move(ranks);
  threads_ = std::make_unique<RankThreads>(static_cast<int32_t>(ranks_.size()));
  return absl::OkStatus();
}

int32_t TensorParallelBackend::ranks() const { return static_cast<int32_t>(ranks_.size()); }
std::string_view TensorParallelBackend::name() const { return ranks_[0].backend->name(); }
int64_t TensorParallelBackend::num_slots() const { return ranks_[0].backend->num_slots(); }
int64_t TensorParallelBackend::num_kv_blocks() const { return ranks_[0].backend->num_kv_blocks(); }
int64_t TensorParallelBackend::SlotPosition(int64_t slot) const {
  return ranks_[0].backend->SlotPosition(slot);
}
absl::Status TensorParallelBackend::Health() const {
  for (size_t r = 0; r < ranks_.size(); ++r) {
    absl::Status status = ranks_[r].backend->Health();
    if (status.ok() && ranks_[r].health) status = ranks_[r].health();
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("rank ", r, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

int64_t TensorParallelBackend::preferred_prefill_tokens_per_step() const {
  return ranks_[0].backend->preferred_prefill_tokens_per_step();
}

absl::Status TensorParallelBackend::ResetSlot(int64_t slot) {
  RETURN_IF_ERROR(CheckSlot(slot));
  for (Rank& rank : ranks_) RETURN_IF_ERROR(rank.backend->ResetSlot(slot));
  return absl::OkStatus();
}

absl::Status TensorParallelBackend::CopySlot(int64_t from, int64_t to) {
  RETURN_IF_ERROR(CheckSlot(from));
  RETURN_IF_ERROR(CheckSlot(to));
  for (Rank& rank : ranks_) RETURN_IF_ERROR(rank.backend->CopySlot(from, to));
  return absl::OkStatus();
}

absl::Status TensorParallelBackend::CopyKvBlock(int32_t from, int32_t to) {
  if (num_kv_blocks() == 0) return ModelBackend::CopyKvBlock(from, to);
  RETURN_IF_ERROR(CheckKvBlock(from));
  RETURN_IF_ERROR(CheckKvBlock(to));
  for (Rank& rank : ranks_) RETURN_IF_ERROR(rank.backend->CopyKvBlock(from, to));
  return absl::OkStatus();
}

std::string TensorParallelBackend::state_format() const {
  return absl::StrCat(ranks_[0].backend->state_format(), "/tp", ranks());
}

absl::Status TensorParallelBackend::ExportSlot(int64_t slot, std::string* bytes) {
  RETURN_IF_ERROR(CheckSlot(slot));
  bytes->clear();
  std::string part;
  for (Rank& rank : ranks_) {
    RETURN_IF_ERROR(rank.backend->ExportSlot(slot, &part));
    bytes->append(part);
  }
  return absl::OkStatus();
}

absl::Status TensorParallelBackend::ImportSlot(int64_t slot, std::string_view bytes,
                                               int64_t position) {
  RETURN_IF_ERROR(CheckSlot(slot));
  RETURN_IF_ERROR(CheckImport("a state", bytes, state_bytes_per_slot_));
  for (Rank& rank : ranks_) {
    const int64_t size = rank.backend->state_bytes_per_slot();
    RETURN_IF_ERROR(rank.backend->ImportSlot(slot, bytes.substr(0, size), position));
    bytes.remove_prefix(size);
  }
  return absl::OkStatus();
}

absl::Status TensorParallelBackend::ExportKvBlock(int32_t block, std::string* bytes) {
  RETURN_IF_ERROR(CheckKvBlock(block));
  bytes->clear();
  std::string part;
  for (Rank& rank : ranks_) {
    RETURN_IF_ERROR(rank.backend->ExportKvBlock(block, &part));
    bytes->append(part);
  }
  return absl::OkStatus();
}

absl::Status TensorParallelBackend::ImportKvBlock(int32_t block, std::string_view bytes) {
  RETURN_IF_ERROR(CheckKvBlock(block));
  RETURN_IF_ERROR(CheckImport("a KV block", bytes, kv_.bytes_per_block()));
  for (Rank& rank : ranks_) {
    const int64_t size = rank.backend->kv_layout().bytes_per_block();
    RETURN_IF_ERROR(rank.backend->ImportKvBlock(block, bytes.substr(0, size)));
    bytes.remove_prefix(size);
  }
  return absl::OkStatus();
}

void TensorParallelBackend::AbortStep(const std::vector<int32_t>& running) {
  const absl::Status why = absl::DeadlineExceededError(
      absl::StrCat("a tensor-parallel step did not finish within ",
                   std::chrono::duration<double>(step_timeout_).count(), " s (still running: rank",
                   running.size() == 1 ? " " : "s ", absl::StrJoin(running, ", "),
                   "); its collectives were aborted"));
  watchdog_failure_ = why;
  group_->rank(0).Abort(why);
  for (Rank& rank : ranks_) {
    if (rank.on_failure) rank.on_failure(why);
  }
}

absl::Status TensorParallelBackend::RunRanks(const std::function<absl::Status(int32_t)>& step) {
  const int32_t n = ranks();
  std::vector<absl::Status> results(n);
  watchdog_failure_ = absl::OkStatus();
  threads_->Run(
      [&](int32_t r) {
        results[r] = step(r);
        if (!results[r].ok()) {
          // The others must not wait for this rank in their next collective.
          const absl::Status why(results[r].code(),
                                 absl::StrCat("rank ", r, ": ", results[r].message()));
          group_->rank(r).Abort(why);
          if (ranks_[r].on_failure) ranks_[r].on_failure(why);
        }
      },
      step_timeout_, [this](const std::vector<int32_t>& running) { AbortStep(running); });
  if (!watchdog_failure_.ok()) {
    // Even if every rank then finished, their collectives were aborted under them.
    group_->Reset();
    return watchdog_failure_;
  }
  for (int32_t r = 0; r < n; ++r) {
    if (results[r].ok()) continue;
    // What failed first (a rank's own error, or a collective's time-out) is the group's failure.
    absl::Status failure = group_->failure();
    group_->Reset();
    return failure.ok() ? results[r] : failure;
  }
  return absl::OkStatus();
}

absl::Status TensorParallelBackend::Forward(std::span<const SlotChunk> chunks, LogitsFor which,
                                            std::vector<float>* logits) {
  RETURN_IF_ERROR(ValidateChunks(chunks));
  const RankChunks parts(chunks, ranks());
  std::vector<std::vector<float>> rank_logits(ranks());  // rank 0's are `logits`
  RETURN_IF_ERROR(RunRanks([&](int32_t r) {
    return ranks_[r].backend->Forward(parts.chunks[r], which, r == 0 ? logits : &rank_logits[r]);
  }));
  parts.MergeStats();
  return absl::OkStatus();
}

absl::Status TensorParallelBackend::ForwardGreedy(std::span<const SlotChunk> chunks,
                                                  std::vector<int32_t>* next_tokens) {
  RETURN_IF_ERROR(ValidateChunks(chunks));
  const RankChunks parts(chunks, ranks());
  std::vector<std::vector<int32_t>> rank_tokens(ranks());
  RETURN_IF_ERROR(RunRanks([&](int32_t r) {
    return ranks_[r].backend->ForwardGreedy(parts.chunks[r],
                                            r == 0 ? next_tokens : &rank_tokens[r]);
  }));
  parts.MergeStats();
  return absl::OkStatus();
}

absl::Status TensorParallelBackend::ForwardSample(std::span<const SlotChunk> chunks,
                                                  std::span<const TokenPick> picks,
                                                  std::vector<PickedToken>* picked) {
  RETURN_IF_ERROR(ValidateChunks(chunks));
  RETURN_IF_ERROR(ValidatePicks(chunks, picks));
  const RankChunks parts(chunks, ranks());
  std::vector<std::vector<PickedToken>> rank_picks(ranks());
  RETURN_IF_ERROR(RunRanks([&](int32_t r) {
    return ranks_[r].backend->ForwardSample(parts.chunks[r], picks,
                                            r == 0 ? picked : &rank_picks[r]);
  }));
  parts.MergeStats();
  return absl::OkStatus();
}

}  // namespace ridge
