// The CUDA backend (one GPU): bf16 weights resident on the device, projections and MLP through
// cuBLAS (bf16 inputs, fp32 accumulation) over all tokens of a step, the fused Mesa recurrence
// kernel (kernels/cuda/mesa_recurrence.h) once per layer, and every sequence's state in one
// device allocation. Decode steps of up to kMaxGraphBatch sequences replay CUDA graphs captured
// per batch-size bucket, so host launch overhead does not dominate small batches.
//
// This header has no CUDA types: code built without CUDA can name the class, and Create fails
// cleanly on a machine without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "models/mesanet_state.h"
#include "models/mesanet_weights.h"
#include "models/model_backend.h"

namespace ridge {

// The workspace the backend gives cuBLAS (tools/bench/gemm_bench gives it the same).
inline constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

struct CudaBackendOptions {
  int device = 0;
  int64_t num_slots = 64;
  bool use_graphs = true;  // replay captured graphs for decode steps
  // Prompt pieces at least this long run chunked (all tokens of a chunk solve together on the
  // tensor cores); shorter ones run token by token, as decode tokens do. On an H200 (140M,
  // tolerance 0) a step of up to 16 short chunked pieces costs about 3 ms however short they are
  // (30 CG iterations of a 16-token slice's latency), the token path 0.5 ms + 0.26 ms a token:
  // even near 10 tokens, at batch 1, 4 and 16.
  int64_t chunked_prefill_min_tokens = 10;
  // A chunked solve of tolerance-0 prompts switches from 3xTF32 to one f16 pass once its
  // tokens' relative residuals are all below this (cuda::MesaPrefillArgs); 0 never switches.
  float prefill_single_pass_residual = 1e-2f;
};

class CudaBackend : public ModelBackend {
 public:
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const MesaNetConfig& config,
                                                             const MesaNetWeights& weights,
                                                             const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  const MesaNetConfig& config() const;
  const ModelSpec& spec() const override;
  const KvLayout& kv_layout() const override;
  int64_t SlotPosition(int64_t slot) const override;
  // Unavailable once the GPU's context holds a sticky error (DeviceHealth).
  absl::Status Health() const override;
  int64_t num_slots() const override;
  absl::Status ResetSlot(int64_t slot) override;
  absl::Status Forward(std::span<const SlotChunk> chunks, LogitsFor which,
                       std::vector<float>* logits) override;
  absl::Status ForwardGreedy(std::span<const SlotChunk> chunks,
                             std::vector<int32_t>* next_tokens) override;
  // Samples on the GPU (kernels/cuda/token_sampling.h): only the picks come back to the host.
  absl::Status ForwardSample(std::span<const SlotChunk> chunks, std::span<const TokenPick> picks,
                             std::vector<PickedToken>* picked) override;

  // Slot contents as a host MesaState (same layout), for tests, snapshots and debugging.
  absl::Status ReadSlot(int64_t slot, MesaState* state) const;
  absl::Status WriteSlot(int64_t slot, const MesaState& state);
  // Device-to-device copy of a whole state (e.g. for a prefix cache).
  absl::Status CopySlot(int64_t from, int64_t to) override;
  std::string state_format() const override;
  absl::Status ExportSlot(int64_t slot, std::string* bytes) override;
  absl::Status ImportSlot(int64_t slot, std::string_view bytes, int64_t position) override;

  int64_t weight_bytes() const;
  int64_t state_bytes_per_slot() const override;
  int64_t preferred_prefill_tokens_per_step() const override;

 private:
  struct Impl;
  explicit CudaBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ridge
