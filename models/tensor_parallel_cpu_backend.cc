#include "models/tensor_parallel_cpu_backend.h"

#include <omp.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <span>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/arch/hybrid_qwen3.h"
#include "models/cpu_backend.h"
#include "models/tensor_parallel.h"
#include "models/tensor_parallel_weights.h"
#include "models/thread_collectives.h"

namespace ridge {

struct TensorParallelCpuBackend::Rank {
  RankShard shard;
  RankWeights weights;
  std::unique_ptr<CpuDecoder> decoder;
  std::unique_ptr<CpuBackend> storage;  // this rank's share of every slot and block
};

// Threads for ranks 1..N-1 that wait for a job, and rank 0 on the caller's thread. Each rank's
// OpenMP regions take an N-th of the cores.
class TensorParallelCpuBackend::RankThreads {
 public:
  explicit RankThreads(int32_t ranks)
      : ranks_(ranks), threads_per_rank_(std::max(1, omp_get_max_threads() / ranks)) {
    for (int32_t r = 1; r < ranks; ++r) workers_.emplace_back([this, r] { Loop(r); });
  }

  ~RankThreads() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  // Runs job(r) for every rank at once; returns when every rank is done.
  void Run(const std::function<void(int32_t)>& job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      pending_ = ranks_ - 1;
      ++generation_;
    }
    wake_.notify_all();
    const int caller_threads = omp_get_max_threads();
    omp_set_num_threads(threads_per_rank_);
    job(0);
    omp_set_num_threads(caller_threads);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
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
      if (--pending_ == 0) done_.notify_all();
    }
  }

  const int32_t ranks_;
  const int threads_per_rank_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int32_t)>* job_ = nullptr;
  int64_t generation_ = 0;
  int32_t pending_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

namespace {

// Every rank's share of a slot's state and of a KV block under `plan`, added up.
TensorParallelFootprint FootprintOf(const ModelSpec& spec, std::span<const RankShard> plan,
                                    int64_t kv_block_size) {
  TensorParallelFootprint footprint;
  for (const RankShard& shard : plan) {
    const ModelSpec rank_spec = RankSpec(spec, shard);
    footprint.state_bytes_per_slot += PlanRecurrentLayout(rank_spec).bytes_per_slot();
    footprint.kv_bytes_per_block +=
        PlanKvLayout(rank_spec, kv_block_size).floats_per_block() * int64_t{sizeof(float)};
  }
  return footprint;
}

}  // namespace

absl::StatusOr<TensorParallelFootprint> TensorParallelCpuBackend::Footprint(const ModelSpec& spec,
                                                                            int32_t ranks,
                                                                            int64_t kv_block_size) {
  ASSIGN_OR_RETURN(const std::vector<RankShard> plan, PlanTensorParallel(spec, ranks));
  return FootprintOf(spec, plan, kv_block_size);
}

TensorParallelCpuBackend::TensorParallelCpuBackend(ModelSpec spec,
                                                   const TensorParallelCpuOptions& options)
    : spec_(std::move(spec)),
      num_slots_(options.num_slots),
      kv_(PlanKvLayout(spec_, options.kv_block_size)) {
  num_kv_blocks_ = kv_.empty() ? 0 : options.num_kv_blocks;
}

TensorParallelCpuBackend::~TensorParallelCpuBackend() = default;

absl::StatusOr<std::unique_ptr<TensorParallelCpuBackend>> TensorParallelCpuBackend::Create(
    const ModelSpec& spec, const HybridWeights& weights, const TensorParallelCpuOptions& options) {
  if (options.num_slots < 1 || options.num_kv_blocks < 0 || options.kv_block_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallelism: ", options.num_slots, " slots, ", options.num_kv_blocks,
                     " KV blocks of ", options.kv_block_size, " tokens"));
  }
  ASSIGN_OR_RETURN(std::vector<RankShard> plan, PlanTensorParallel(spec, options.ranks));
  std::unique_ptr<TensorParallelCpuBackend> backend(new TensorParallelCpuBackend(spec, options));
  backend->collectives_ =
      std::make_unique<ThreadCollectives>(options.ranks, options.collective_timeout);
  backend->footprint_ = FootprintOf(spec, plan, options.kv_block_size);
  int64_t kv_floats_per_token = 0;
  for (RankShard& shard : plan) {
    auto rank = std::make_unique<Rank>();
    rank->shard = std::move(shard);
    rank->weights = SliceRankWeights(spec, weights, rank->shard);
    ModelSpec rank_spec = RankSpec(spec, rank->shard);
    DecoderWeights decoder_weights =
        HybridDecoderWeights(rank_spec, rank->weights.weights, options.kv_block_size);
    const DecoderRank part{.collective = &backend->collectives_->rank(rank->shard.rank),
                           .vocab = rank->shard.vocab};
    rank->decoder = std::make_unique<CpuDecoder>(std::move(rank_spec), std::move(decoder_weights),
                                                 options.kv_block_size, part);
    rank->storage = std::make_unique<CpuBackend>(rank->decoder.get(), options.num_slots,
                                                 backend->num_kv_blocks_);
    kv_floats_per_token += rank->decoder->kv_layout().floats_per_token;
    backend->ranks_.push_back(std::move(rank));
  }
  backend->kv_.floats_per_token = kv_floats_per_token;
  backend->threads_ = std::make_unique<RankThreads>(options.ranks);
  return backend;
}

int32_t TensorParallelCpuBackend::ranks() const { return static_cast<int32_t>(ranks_.size()); }

int64_t TensorParallelCpuBackend::SlotPosition(int64_t slot) const {
  return ranks_[0]->storage->SlotPosition(slot);
}

absl::Status TensorParallelCpuBackend::ResetSlot(int64_t slot) {
  RETURN_IF_ERROR(CheckSlot(slot));
  for (auto& rank : ranks_) RETURN_IF_ERROR(rank->storage->ResetSlot(slot));
  return absl::OkStatus();
}

absl::Status TensorParallelCpuBackend::CopySlot(int64_t from, int64_t to) {
  RETURN_IF_ERROR(CheckSlot(from));
  RETURN_IF_ERROR(CheckSlot(to));
  for (auto& rank : ranks_) RETURN_IF_ERROR(rank->storage->CopySlot(from, to));
  return absl::OkStatus();
}

absl::Status TensorParallelCpuBackend::CopyKvBlock(int32_t from, int32_t to) {
  if (num_kv_blocks_ == 0) return ModelBackend::CopyKvBlock(from, to);
  RETURN_IF_ERROR(CheckKvBlock(from));
  RETURN_IF_ERROR(CheckKvBlock(to));
  for (auto& rank : ranks_) RETURN_IF_ERROR(rank->storage->CopyKvBlock(from, to));
  return absl::OkStatus();
}

std::string TensorParallelCpuBackend::state_format() const {
  return absl::StrCat("cpu/fp32/tp", ranks());
}

absl::Status TensorParallelCpuBackend::ExportSlot(int64_t slot, std::string* bytes) {
  RETURN_IF_ERROR(CheckSlot(slot));
  bytes->clear();
  std::string part;
  for (auto& rank : ranks_) {
    RETURN_IF_ERROR(rank->storage->ExportSlot(slot, &part));
    bytes->append(part);
  }
  return absl::OkStatus();
}

absl::Status TensorParallelCpuBackend::ImportSlot(int64_t slot, std::string_view bytes,
                                                  int64_t position) {
  RETURN_IF_ERROR(CheckSlot(slot));
  RETURN_IF_ERROR(CheckImport("a state", bytes, footprint_.state_bytes_per_slot));
  for (auto& rank : ranks_) {
    const int64_t size = rank->storage->state_bytes_per_slot();
    RETURN_IF_ERROR(rank->storage->ImportSlot(slot, bytes.substr(0, size), position));
    bytes.remove_prefix(size);
  }
  return absl::OkStatus();
}

absl::Status TensorParallelCpuBackend::ExportKvBlock(int32_t block, std::string* bytes) {
  RETURN_IF_ERROR(CheckKvBlock(block));
  bytes->clear();
  std::string part;
  for (auto& rank : ranks_) {
    RETURN_IF_ERROR(rank->storage->ExportKvBlock(block, &part));
    bytes->append(part);
  }
  return absl::OkStatus();
}

absl::Status TensorParallelCpuBackend::ImportKvBlock(int32_t block, std::string_view bytes) {
  RETURN_IF_ERROR(CheckKvBlock(block));
  RETURN_IF_ERROR(CheckImport("a KV block", bytes, footprint_.kv_bytes_per_block));
  for (auto& rank : ranks_) {
    const int64_t size = rank->storage->kv_layout().bytes_per_block();
    RETURN_IF_ERROR(rank->storage->ImportKvBlock(block, bytes.substr(0, size)));
    bytes.remove_prefix(size);
  }
  return absl::OkStatus();
}

absl::Status TensorParallelCpuBackend::Forward(std::span<const SlotChunk> chunks, LogitsFor which,
                                               std::vector<float>* logits) {
  RETURN_IF_ERROR(ValidateChunks(chunks));
  const int32_t n = ranks();
  // Each rank adds its heads' solves to stats of its own, merged after the step.
  std::vector<std::vector<SlotChunk>> rank_chunks(n, {chunks.begin(), chunks.end()});
  std::vector<std::vector<SolverStats>> rank_stats(n, std::vector<SolverStats>(chunks.size()));
  for (int32_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (chunks[i].stats != nullptr) rank_chunks[r][i].stats = &rank_stats[r][i];
    }
  }
  std::vector<absl::Status> results(n);
  std::vector<std::vector<float>> rank_logits(n);  // rank 0's are `logits`
  threads_->Run([&](int32_t r) {
    results[r] =
        ranks_[r]->storage->Forward(rank_chunks[r], which, r == 0 ? logits : &rank_logits[r]);
    if (!results[r].ok()) {
      // The others must not wait for this rank in their next collective.
      collectives_->rank(r).Abort(
          absl::Status(results[r].code(), absl::StrCat("rank ", r, ": ", results[r].message())));
    }
  });
  for (int32_t r = 0; r < n; ++r) {
    if (results[r].ok()) continue;
    // What failed first (a rank's own error, or a collective's time-out) is the group's failure.
    absl::Status failure = collectives_->failure();
    collectives_->Reset();
    return failure.ok() ? results[r] : failure;
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i].stats == nullptr) continue;
    for (int32_t r = 0; r < n; ++r) chunks[i].stats->Merge(rank_stats[r][i]);
  }
  return absl::OkStatus();
}

}  // namespace ridge
