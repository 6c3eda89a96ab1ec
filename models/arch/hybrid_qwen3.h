// The hybrid_qwen3 architecture (Qwen3 with Gated KalmaNet and sliding-window layers;
// shared/specs/gka-hybrid-qwen3.md): config.json into a ModelSpec, tensors into the CPU decoder
// runner with an AttentionMixer or a GkaMixer per layer. Projection weights stay in the
// checkpoint's dtype where the safetensors files are mapped; only the small vectors (norms,
// biases, gates, convolutions) are copied to fp32.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "models/checkpoint.h"
#include "models/hybrid_weights.h"
#include "models/model.h"

namespace ridge {

class HybridWeightSource;  // where the tensors come from: a checkpoint or a generator

class HybridQwen3Model : public Model {
 public:
  // The tensors of checkpoint folder `dir` for `spec` (its config.json, read by the caller):
  // every tensor the spec lists must be present with its exact shape; any other tensor is an
  // error naming it (except lm_head.weight beside tied embeddings).
  static absl::StatusOr<std::unique_ptr<HybridQwen3Model>> Load(const std::filesystem::path& dir,
                                                                const ModelSpec& spec,
                                                                int64_t kv_block_size);
  // A model of `spec`'s shape with random bf16 weights of realistic scales (no checkpoint
  // read), for measuring a configuration's speed and memory.
  static absl::StatusOr<std::unique_ptr<HybridQwen3Model>> Random(const ModelSpec& spec,
                                                                  uint64_t seed,
                                                                  int64_t kv_block_size);

  const CpuDecoder& decoder() const override { return *decoder_; }
  const HybridWeights* hybrid_weights() const override { return &weights_; }

 private:
  HybridQwen3Model() = default;
  absl::Status BuildDecoder(ModelSpec spec, HybridWeightSource& source, int64_t kv_block_size);

  std::unique_ptr<Checkpoint> checkpoint_;  // mapped: the weights point into it
  std::vector<std::unique_ptr<uint16_t[]>> random_weights_;
  std::unique_ptr<CpuDecoder> decoder_;
  HybridWeights weights_;  // the same tensors as the decoder's, for the GPU
};

// The CPU decoder's layers over `weights` (views of its matrices, copies of its small vectors): a
// GkaMixer or an AttentionMixer per layer of `spec`, at the offsets of spec's state and KV
// layouts. `spec` may be a tensor-parallel rank's (RankSpec) with that rank's weights.
DecoderWeights HybridDecoderWeights(const ModelSpec& spec, const HybridWeights& weights,
                                    int64_t kv_block_size);

}  // namespace ridge
