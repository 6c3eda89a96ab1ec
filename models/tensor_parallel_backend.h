// A hybrid_qwen3 model split over N ranks as PlanTensorParallel says (issue 33; docs/DESIGN.md,
// "Tensor parallelism"), seen by the engine as one backend: each rank is a backend of its own
// (the CPU's, or the CUDA hybrid backend on a GPU) holding its share of the weights, of every
// slot's state and of every KV block, and stepping in lock-step with the others through the
// group's collectives; rank 0 answers for the group. A slot or block operation is done on every
// rank; an exported state or block is the ranks' parts one after the other. The ranks run on
// threads of this process (rank 0 on the caller's). A step whose ranks have not all finished
// within the step time-out is failed by a watchdog, which aborts the collectives (NCCL's kernels
// waiting for a peer then end) so that no rank waits forever. TensorParallelCpuBackend and
// TensorParallelCudaBackend build the ranks.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "models/model_backend.h"

namespace ridge {

class ThreadCollectives;

class TensorParallelBackend : public ModelBackend {
 public:
  ~TensorParallelBackend() override;

  int32_t ranks() const;

  std::string_view name() const override;
  const ModelSpec& spec() const override { return spec_; }
  int64_t num_slots() const override;
  // Every rank's part of a slot and of a block (a replicated key/value head is stored on each
  // rank that reads it); kv_layout() has the full model's layer offsets and block size.
  int64_t state_bytes_per_slot() const override { return state_bytes_per_slot_; }
  const KvLayout& kv_layout() const override { return kv_; }
  int64_t num_kv_blocks() const override;
  int64_t SlotPosition(int64_t slot) const override;
  // The first rank's error, or why a rank's collectives can no longer run (rank.health).
  absl::Status Health() const override;
  int64_t preferred_prefill_tokens_per_step() const override;

  absl::Status ResetSlot(int64_t slot) override;
  absl::Status CopySlot(int64_t from, int64_t to) override;
  absl::Status CopyKvBlock(int32_t from, int32_t to) override;
  // The ranks' format with "/tpN": a state saved at one split loads only into the same split.
  std::string state_format() const override;
  absl::Status ExportSlot(int64_t slot, std::string* bytes) override;
  absl::Status ImportSlot(int64_t slot, std::string_view bytes, int64_t position) override;
  absl::Status ExportKvBlock(int32_t block, std::string* bytes) override;
  absl::Status ImportKvBlock(int32_t block, std::string_view bytes) override;
  absl::Status Forward(std::span<const SlotChunk> chunks, LogitsFor which,
                       std::vector<float>* logits) override;
  absl::Status ForwardGreedy(std::span<const SlotChunk> chunks,
                             std::vector<int32_t>* next_tokens) override;
  absl::Status ForwardSample(std::span<const SlotChunk> chunks, std::span<const TokenPick> picks,
                             std::vector<PickedToken>* picked) override;

 protected:
  struct Rank {
    std::shared_ptr<const void> owned;  // what `backend` points into (weights, decoder, ...)
    std::unique_ptr<ModelBackend> backend;
    // Called with the rank's error when its step fails, besides aborting `group` (a collective
    // the others may wait in that is not the group's, e.g. NCCL's).
    std::function<void(const absl::Status&)> on_failure = nullptr;
    // Why the rank can never step again (its NCCL communicator aborted); null: always OK.
    std::function<absl::Status()> health = nullptr;
  };
  // `group` is the ranks' collectives (a rank that fails aborts them so that no other waits).
  // A step still running after `step_timeout` is failed by the watchdog (0: no watchdog).
  TensorParallelBackend(ModelSpec spec, std::unique_ptr<ThreadCollectives> group,
                        std::chrono::milliseconds step_timeout);
  // The ranks in rank order; an error unless they agree on slots, blocks and block size.
  absl::Status SetRanks(std::vector<Rank> ranks);
  const ModelBackend& rank_backend(int32_t r) const { return *ranks_[r].backend; }

 private:
  class RankThreads;
  // Runs step(r) on every rank at once; the first failure (a rank's own error, the collective
  // time-out it caused in the others, or the watchdog's) is the step's, after which the group is
  // reset.
  absl::Status RunRanks(const std::function<absl::Status(int32_t)>& step);
  // Called by the watchdog when a step passes the time-out, with the ranks still running: fails
  // every rank's collectives (the group's and on_failure's) with the error the step returns.
  void AbortStep(const std::vector<int32_t>& running);
  // Each rank's copy of `chunks` adds its heads' solves to stats of its own, merged into the
  // chunks' after the step.
  struct RankChunks;

  ModelSpec spec_;
  int64_t state_bytes_per_slot_ = 0;
  KvLayout kv_;
  std::vector<Rank> ranks_;
  std::unique_ptr<ThreadCollectives> group_;
  const std::chrono::milliseconds step_timeout_;
  absl::Status watchdog_failure_;  // the watchdog's error for the step under way (else OK)
  std::unique_ptr<RankThreads> threads_;
};

}  // namespace ridge
