// The CPU runner's view of one step, and the interface every layer kind's token mixer implements
// (MesaMixer, GkaMixer, AttentionMixer). A mixer reads its layer's normalised input, advances
// its part of each sequence's memory (its recurrent state at its offset in the slot, or its
// keys and values in the sequence's KV blocks), and adds its output to the residual stream.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/solver_types.h"
#include "models/model_spec.h"
#include "models/step_types.h"

namespace ridge {

// One sequence's part of a CPU step.
struct CpuSequence {
  float* state = nullptr;  // its recurrent state (RecurrentLayout); null without recurrent layers
  int64_t position = 0;    // tokens it consumed before this step
  // Its KV block table: entry i holds positions [i * block_size, (i + 1) * block_size).
  std::span<const int32_t> kv_blocks = {};
  std::span<const int32_t> tokens = {};
  SolverOptions solver;
  SolverStats* stats = nullptr;  // optional: every solve of this chunk is added here
  SolvePhase phase = SolvePhase::kPrefill;
};

struct MixerBatch {
  std::span<const CpuSequence> sequences;
  std::vector<int64_t> first_row = {};  // per sequence: its first row in the step's activations
  int64_t rows = 0;
  float* kv_storage = nullptr;  // the KV blocks, laid out as KvLayout says
  const KvLayout* kv_layout = nullptr;
};

// Runs step(sequence index, head, stats) for every (sequence, head) pair of the batch in
// parallel (a pair owns its head's state, so pairs are independent), each pair adding its solves
// to its own `stats`, then merges those into the sequences' SolverStats.
template <typename Step>
void ForEachSequenceHead(const MixerBatch& batch, int64_t heads, const Step& step) {
  const int64_t pairs = static_cast<int64_t>(batch.sequences.size()) * heads;
  std::vector<SolverStats> pair_stats(pairs);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t pair = 0; pair < pairs; ++pair) step(pair / heads, pair % heads, pair_stats[pair]);
  for (int64_t pair = 0; pair < pairs; ++pair) {
    SolverStats* stats = batch.sequences[pair / heads].stats;
    if (stats != nullptr) stats->Merge(pair_stats[pair]);
  }
}

class CpuMixer {
 public:
  virtual ~CpuMixer() = default;
  // hidden[rows, C] += mixer(normed[rows, C]), advancing each sequence's memory of this layer.
  virtual void Forward(const MixerBatch& batch, const float* normed, float* hidden) const = 0;
};

}  // namespace ridge
