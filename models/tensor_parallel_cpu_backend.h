// Tensor parallelism on the CPU (issue 33; docs/DESIGN.md, "Tensor parallelism"): a
// hybrid_qwen3 model split over N ranks as PlanTensorParallel says, each rank a thread of this
// process with its share of the weights, of every slot's state and of every KV block, stepping in
// lock-step with the others through ThreadCollectives. Above it, the engine sees one backend whose
// slots and blocks span the ranks: a slot or block operation is done on every rank, an exported
// state is the ranks' parts one after the other.
//
// It is not a way to speed up a CPU (the CPU backend's products and solves already use every
// core for a batch); it runs the same split, collectives and failure handling as a multi-GPU
// backend would, so that a tensor-parallel deployment's outputs can be checked anywhere.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "models/hybrid_weights.h"
#include "models/model_backend.h"

namespace ridge {

class ThreadCollectives;

struct TensorParallelCpuOptions {
  int32_t ranks = 2;
  int64_t num_slots = 1;
  int64_t num_kv_blocks = 0;  // ignored without full-attention layers
  int64_t kv_block_size = 16;
  // How long a rank waits in a collective for the others before the step fails.
  std::chrono::milliseconds collective_timeout = std::chrono::minutes(10);
};

// The host memory one slot's state and one KV block take over all ranks (a replicated key/value
// head is stored on each rank that reads it).
struct TensorParallelFootprint {
  int64_t state_bytes_per_slot = 0;
  int64_t kv_bytes_per_block = 0;
};

class TensorParallelCpuBackend : public ModelBackend {
 public:
  // `weights` (the full model's, of `spec`) must outlive the backend. An error names what does
  // not split over the ranks.
  static absl::StatusOr<std::unique_ptr<TensorParallelCpuBackend>> Create(
      const ModelSpec& spec, const HybridWeights& weights, const TensorParallelCpuOptions& options);
  static absl::StatusOr<TensorParallelFootprint> Footprint(const ModelSpec& spec, int32_t ranks,
                                                           int64_t kv_block_size);
  ~TensorParallelCpuBackend() override;

  int32_t ranks() const;

  std::string_view name() const override { return "cpu"; }
  const ModelSpec& spec() const override { return spec_; }
  int64_t num_slots() const override { return num_slots_; }
  int64_t state_bytes_per_slot() const override { return footprint_.state_bytes_per_slot; }
  // The full model's block size; floats_per_block() counts every rank's part of a block.
  const KvLayout& kv_layout() const override { return kv_; }
  int64_t num_kv_blocks() const override { return num_kv_blocks_; }
  int64_t SlotPosition(int64_t slot) const override;

  absl::Status ResetSlot(int64_t slot) override;
  absl::Status CopySlot(int64_t from, int64_t to) override;
  absl::Status CopyKvBlock(int32_t from, int32_t to) override;
  std::string state_format() const override;
  absl::Status ExportSlot(int64_t slot, std::string* bytes) override;
  absl::Status ImportSlot(int64_t slot, std::string_view bytes, int64_t position) override;
  absl::Status ExportKvBlock(int32_t block, std::string* bytes) override;
  absl::Status ImportKvBlock(int32_t block, std::string_view bytes) override;
  absl::Status Forward(std::span<const SlotChunk> chunks, LogitsFor which,
                       std::vector<float>* logits) override;

 private:
  struct Rank;
  class RankThreads;
  TensorParallelCpuBackend(ModelSpec spec, const TensorParallelCpuOptions& options);

  ModelSpec spec_;
  int64_t num_slots_ = 0, num_kv_blocks_ = 0;
  TensorParallelFootprint footprint_;
  KvLayout kv_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::unique_ptr<ThreadCollectives> collectives_;
  std::unique_ptr<RankThreads> threads_;
};

}  // namespace ridge
