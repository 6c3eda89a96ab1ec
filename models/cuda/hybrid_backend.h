// The CUDA backend for hybrid models (hybrid_qwen3: Gated KalmaNet, full and sliding-window
// attention layers): bf16 weights resident on one GPU, the products through cuBLAS (or the
// project's few-rows kernel), one launch per layer for each mixer's per-sequence work (the GKA
// recurrence with each sequence's own Chebyshev budget, paged GQA attention over the KV blocks),
// every sequence's recurrent state in a pool of slots and the full-attention layers' keys and
// values in a pool of bf16 KV blocks, both in GPU memory and sized by one planner. Decode steps
// replay CUDA graphs captured per batch bucket (models/cuda/step_graphs.h).
//
// This header has no CUDA types: code built without CUDA can name the class, and Create fails
// cleanly on a machine without a GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "models/hybrid_weights.h"
#include "models/model_backend.h"
#include "models/tensor_parallel.h"

namespace ridge {

class DeviceCollective;

// How the full-attention layers' keys and values are stored on the GPU: bf16, or e4m3 with an
// fp32 scale per (position, kv head) vector (kernels/cuda/attention_rows.h, PagedKv), about half
// the bytes: twice the context in the same memory, and decode reads half as much.
enum class KvCacheDtype { kBf16, kFp8E4m3 };

// The KV block layout CudaHybridBackend uses for `spec`: the CPU's layer order, elements of
// `dtype` (for fp8, bytes: each layer's part holds its scales too).
KvLayout PlanDeviceKvLayout(const ModelSpec& spec, int64_t block_size, KvCacheDtype dtype);

// The state slot layout CudaHybridBackend uses for `spec`: the CPU's layer order, each GKA
// layer's Hs packed to its upper block triangle (kernels/gka_slot_layout.h), so a slot is about
// a quarter smaller than the CPU's; sliding-window rings as the CPU's.
RecurrentLayout PlanDeviceRecurrentLayout(const ModelSpec& spec);

struct CudaHybridOptions {
  int device = 0;
  int64_t num_slots = 64;
  // KV blocks to allocate; 0: as many as fit in the memory the planner gives the KV cache.
  int64_t num_kv_blocks = 0;
  int64_t kv_block_size = 16;
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kBf16;  // fp8 needs blocks of a multiple of 16
  // The share of the GPU's memory the backend may take in all (weights, pools, step buffers),
  // as vLLM's --gpu-memory-utilization.
  double gpu_memory_utilization = 0.9;
  // Tokens of KV cache per slot the planner aims for when num_kv_blocks is 0 (the rest of the
  // budget beyond that goes to more blocks as well).
  int64_t default_context_tokens = 8192;
  // Replay decode steps (one token a sequence, up to kMaxGraphBatch sequences) from CUDA graphs
  // captured per batch bucket; the padding sequences run on a slot and a KV block of their own.
  bool use_graphs = true;
  // The chunked GKA prefill's products with each chunk's starting state on the tensor cores
  // (3xTF32, about fp32's accuracy) rather than the CUDA cores (kernels/cuda/gka_chunked_prefill):
  // on an H200 the 8B shape's time to first token of a 14K prompt is 4% shorter and a batch of
  // 8 x 16K prompts prefills 6% faster (tools/bench/RESULTS.md).
  bool gka_prefill_tensor_cores = true;
  // Set when the backend is one rank of a tensor-parallel group (models/tensor_parallel.h): the
  // spec and weights Create gets are then the rank's (RankSpec, SliceRankWeights), whose
  // embedding and output layer hold the rows of `vocab`. Each mixer's and MLP's partial output is
  // summed over the group before it joins the residual, and the rank's logit columns are gathered
  // on rank 0, whose Forward, ForwardGreedy and ForwardSample answer for the group; the other
  // ranks' return nothing. Every rank must step the same chunks at once. Steps are captured in
  // graphs only if the collective allows it.
  struct Rank {
    DeviceCollective* collective = nullptr;
    IndexRange vocab;
  };
  std::optional<Rank> rank = std::nullopt;
};

class CudaHybridBackend : public ModelBackend {
 public:
  // Refuses (kUnimplemented, naming the shape) what its kernels do not take: head sizes other
  // than 64 and 128, GQA groups other than 1, 2, 4 and 8, convolutions wider than 8, MesaNet
  // layers; kInvalidArgument for an fp8 KV cache in blocks not a multiple of 16 tokens.
  // kFailedPrecondition without a GPU; kResourceExhausted when not even one sequence's state and
  // one block fit.
  static absl::StatusOr<std::unique_ptr<CudaHybridBackend>> Create(
      const ModelSpec& spec, const HybridWeights& weights, const CudaHybridOptions& options);
  ~CudaHybridBackend() override;

  std::string_view name() const override { return "cuda"; }
  const ModelSpec& spec() const override;
  int64_t num_slots() const override;
  int64_t state_bytes_per_slot() const override;
  const KvLayout& kv_layout() const override;
  int64_t num_kv_blocks() const override;
  int64_t SlotPosition(int64_t slot) const override;
  // Unavailable once the GPU's context holds a sticky error (DeviceHealth).
  absl::Status Health() const override;
  int64_t preferred_prefill_tokens_per_step() const override { return 2048; }
  absl::Status ResetSlot(int64_t slot) override;
  absl::Status Forward(std::span<const SlotChunk> chunks, LogitsFor which,
                       std::vector<float>* logits) override;
  absl::Status ForwardGreedy(std::span<const SlotChunk> chunks,
                             std::vector<int32_t>* next_tokens) override;
  absl::Status ForwardSample(std::span<const SlotChunk> chunks, std::span<const TokenPick> picks,
                             std::vector<PickedToken>* picked) override;

  // Device-to-device copy of a slot's state and position (its KV blocks are the caller's).
  absl::Status CopySlot(int64_t from, int64_t to) override;
  absl::Status CopyKvBlock(int32_t from, int32_t to) override;
  std::string state_format() const override;
  absl::Status ExportSlot(int64_t slot, std::string* bytes) override;
  absl::Status ImportSlot(int64_t slot, std::string_view bytes, int64_t position) override;
  absl::Status ExportKvBlock(int32_t block, std::string* bytes) override;
  absl::Status ImportKvBlock(int32_t block, std::string_view bytes) override;
  // A slot's recurrent state as fp32 floats (RecurrentLayout), for tests and debugging.
  absl::Status ReadSlot(int64_t slot, std::vector<float>* state) const;
  int64_t weight_bytes() const;
  // Decode steps run from a captured graph since creation (for tests and benchmarks).
  int64_t graph_replays() const;

 private:
  struct Impl;
  explicit CudaHybridBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ridge
