// The CPU decoder runner: what every architecture shares (embedding, RMSNorm and residual, the
// SwiGLU MLP, the final norm and output layer) around one token mixer per layer. It runs any
// ModelSpec; the architecture loaders (models/arch) build it from a checkpoint.
//
// One call advances any number of sequences by any number of tokens each: the products run
// over all tokens of all sequences at once, prefill and decode alike.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/weight_gemm.h"
#include "models/collective.h"
#include "models/cpu/mixer.h"
#include "models/model_spec.h"
#include "models/tensor_parallel.h"

namespace ridge {

struct DecoderLayerWeights {
  std::vector<float> input_norm, post_norm;  // [C]
  std::unique_ptr<CpuMixer> mixer;
  // The MLP's gate and up rows, [I, C] each: one fused [2I, C] matrix or two parts.
  std::vector<WeightMatrix> gate_up;
  WeightMatrix down;  // [C, I]
};

struct DecoderWeights {
  WeightMatrix embedding;  // [V, C]
  std::vector<DecoderLayerWeights> layers;
  std::vector<float> final_norm;  // [C]
  WeightMatrix head;              // [V, C]: the embedding when tied
};

// The SwiGLU MLP: out[rows, C] (+)= down(silu(gate normed) * up normed), with the gate rows, then
// the up rows, in `gate_up` (one fused [2I, C] matrix or the two parts); `hidden_size` is C.
void SwiGluMlp(std::span<const WeightMatrix> gate_up, const WeightMatrix& down, int64_t rows,
               int64_t hidden_size, const float* normed, float* out, bool accumulate);

// A tensor-parallel rank's part of the model (models/tensor_parallel.h): the decoder's spec and
// weights are then the rank's (RankSpec, SliceRankWeights), its embedding and output layer hold
// the rows of `vocab`, and `collective` joins it to the other ranks.
struct DecoderRank {
  Collective* collective = nullptr;
  IndexRange vocab;
};

class CpuDecoder {
 public:
  CpuDecoder(ModelSpec spec, DecoderWeights weights, int64_t kv_block_size,
             std::optional<DecoderRank> rank = std::nullopt);

  const ModelSpec& spec() const { return spec_; }
  const RecurrentLayout& recurrent_layout() const { return recurrent_; }
  const KvLayout& kv_layout() const { return kv_; }

  // Advances every sequence over its tokens. `kv_storage` holds the blocks the sequences' tables
  // name (null when the model has no attention layer). `logits` receives [rows, vocab]: one row
  // per token (kAllTokens) or one per sequence for its last token (kLastToken). Checks tokens,
  // solver options and that each sequence has its state and the blocks its positions need.
  // A rank adds up its partial embedding, mixer and MLP outputs with the other ranks' and
  // gathers the logits on rank 0 (`logits` is left empty on the others); a failed collective is
  // its error.
  absl::Status Forward(std::span<const CpuSequence> sequences, float* kv_storage, LogitsFor which,
                       std::vector<float>* logits) const;

 private:
  absl::Status Validate(std::span<const CpuSequence> sequences, const float* kv_storage) const;
  // hidden[rows, C]: the tokens' embeddings.
  absl::Status Embed(std::span<const CpuSequence> sequences, float* hidden) const;
  // The rows' logits [rows, vocab], from their final-normed hidden states.
  absl::Status Logits(const float* normed, int64_t rows, std::vector<float>* logits) const;

  ModelSpec spec_;
  DecoderWeights weights_;
  RecurrentLayout recurrent_;
  KvLayout kv_;
  std::optional<DecoderRank> rank_;
};

}  // namespace ridge
