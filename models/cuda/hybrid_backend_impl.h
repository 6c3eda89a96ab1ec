// The CUDA hybrid backend's internals, shared by its translation units: hybrid_backend.cc
// (creation, weight upload, memory plan, slots, the public calls) and hybrid_backend_step.cc (a
// step's table, its kernels and products, its outputs). Not for use outside models/cuda.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <span>
#include <variant>
#include <vector>

#include "models/cuda/device_collective.h"
#include "models/cuda/device_memory.h"
#include "models/cuda/device_step_support.h"
#include "models/cuda/hybrid_backend.h"
#include "models/cuda/step_graphs.h"

namespace ridge {

using cuda::DeviceBuffer;
using cuda::PinnedBuffer;

// Output widths of the products are rounded up to this many columns with zero weight rows
// (cuBLAS is much slower for widths that are not multiples of 8; see the MesaNet backend).
inline constexpr int64_t kHybridWidthMultiple = 16;

// Rows of one sequence a block of the tensor-core prefill attention takes (its kRows).
inline constexpr int64_t kPrefillTileRows = 16;

// The most keys of a graph's decode rows, rounded up to a sixteenth to an eighth of its power of
// two (a multiple of 64): the attention splits a graph fixes then change every few hundred to
// few thousand tokens, not every token.
inline int64_t GraphKeysBucket(int64_t keys) {
  int64_t step = 64;
  while (step * 16 < keys) step *= 2;
  return (keys + step - 1) / step * step;
}

inline int64_t PadWidth(int64_t width) {
  return (width + kHybridWidthMultiple - 1) / kHybridWidthMultiple * kHybridWidthMultiple;
}

struct DeviceGkaLayer {
  GkaSpec spec;
  int64_t state_offset = 0;  // floats into a slot: kernels/gka_slot_layout.h
  // One fused projection [proj_width (padded), C] bf16: q, k, v | a | b | alpha | g.
  DeviceBuffer proj, o_proj;
  int64_t proj_width = 0, channels = 0;  // channels: (Hq+Hk+Hv)*D, the convolved columns
  int32_t a_column = 0, b_column = 0, alpha_column = 0, g_column = 0;
  DeviceBuffer conv, b_bias, alpha_bias, decay_rate, dt_bias, o_norm;  // fp32
};

struct DeviceAttentionLayer {
  AttentionSpec spec;
  // Full attention: elements into a KV block; sliding window: floats into a slot (the ring).
  int64_t memory_offset = 0;
  DeviceBuffer qkv, o_proj;  // [proj_width (padded), C] bf16: q | k | v; [C, Hq*D]
  int64_t proj_width = 0;
  DeviceBuffer q_norm, k_norm;  // fp32 [D]
  DeviceBuffer inv_freq;        // double [D/2]
};

struct DeviceHybridLayer {
  DeviceBuffer input_norm, post_norm;  // fp32 [C]
  std::variant<DeviceGkaLayer, DeviceAttentionLayer> mixer;
  DeviceBuffer gate_up, down;  // bf16 [2I, C] (gate rows, then up), [C, I]
  int64_t intermediate = 0;
};

struct CudaHybridBackend::Impl {
  ModelSpec spec;
  CudaHybridOptions options;
  RecurrentLayout recurrent;
  KvLayout kv;  // bf16 elements; a layer's part of a block: K [Hkv, bs, D], then V alike
  int64_t num_kv_blocks = 0;
  int64_t vocab_stride =
      0;  // the logits' row stride: the vocabulary padded to kHybridWidthMultiple
  // The vocabulary rows this backend's embedding and output layer hold (a rank's slice, else all)
  // and the stride of the output layer's product (vocab_stride without a rank).
  IndexRange local_vocab;
  int64_t head_stride = 0;
  int64_t weight_bytes = 0;
  // The widest of each activation over the layers.
  int64_t max_proj_width = 0, max_channels = 0, max_mixer_out = 0, max_intermediate = 0;
  int64_t max_gka_heads = 0;  // the counters' stride

  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  int32_t sm_count = 0;
  DeviceBuffer cublas_workspace;
  DeviceBuffer embedding, head, final_norm;
  std::vector<DeviceHybridLayer> layers;
  DeviceBuffer state_pool, kv_cache;
  std::vector<int64_t> positions;  // per slot
  // A slot and a KV block past those the callers see: a graph's padding sequences decode there
  // (their writes race with each other; nothing reads them but the padding).
  int32_t scratch_slot = 0, scratch_block = 0;
  // Captured decode steps by (bucket, output, the attention splits' key bucket).
  StepGraphs graphs{kMaxStepGraphs};

  // Step buffers, grown on demand for cap_rows token rows and cap_seqs sequences.
  int64_t cap_rows = 0, cap_seqs = 0, cap_table = 0, cap_partials = 0;
  DeviceBuffer table, hidden, normed, proj, qkv, mixer_out, mlp, act, final_normed, logits, argmax,
      counters, partials;
  // A rank's: a mixer's or MLP's partial output before the group's sum, its logit columns.
  DeviceBuffer rank_partial, local_logits;
  PinnedBuffer host_table, host_logits, host_argmax, host_counters;
  int64_t cap_logit_rows = 0;
  DeviceBuffer sampling_params, sampled, penalties;
  PinnedBuffer host_sampling_params, host_sampled, host_penalties;
  // The logits of a sampled step's rows that are picked on the host (PickRowsOnHost).
  PinnedBuffer host_pick_logits;
  int64_t cap_penalties = 0;
  std::vector<int32_t> token_marks;  // [vocab], zero between steps

  ~Impl() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    if (cublas != nullptr) cublasDestroy(cublas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  GemmContext gemm() const { return {cublas, stream, sm_count}; }

  // Whether this backend's step outputs answer for the model (no rank, or rank 0).
  bool answers() const { return !options.rank || options.rank->collective->rank() == 0; }
  // hidden += x w^T over the model: the product, or a rank's partial product summed over the
  // group.
  absl::Status AddProductToHidden(const void* x, int64_t rows, int64_t in, const DeviceBuffer& w);

  // Where each per-step array lies in the int32 table (sent in one copy per step). The block
  // tables come last: every other offset depends only on the step's rows and sequences, as a
  // captured graph needs.
  struct StepTable {
    int64_t rows = 0, seqs = 0, out_rows = 0;
    int64_t ids = 0, row_sequence = 0, out_row = 0, row_begin = 0, row_count = 0, slot = 0,
            start_position = 0, tolerance = 0, max_iterations = 0, table_begin = 0,
            block_tables = 0, prefill_tiles = 0, decode_rows = 0, total = 0;
    // Full-attention layers take the rows of sequences with one token (decode) through the
    // split-keys kernel, and those of longer pieces (prompts) in tiles of up to 16 rows through
    // the tensor-core one.
    int64_t num_prefill_tiles = 0, num_decode_rows = 0;
    // The most keys any row of the step attends to, and the same over the decode rows (for a
    // graph: rounded up by GraphKeysBucket, the same for every step the graph runs).
    int64_t max_keys = 0, max_decode_keys = 0;
    int64_t max_tokens = 0;  // the most tokens any sequence has
    int64_t real_seqs = 0;   // the callers' sequences; seqs - real_seqs pad a graph's bucket
    // Every row's logits, in row order (LogitsFor::kAllTokens); else out row i is sequence i's
    // last row, and the scored rows (TokenPick::score_next) follow the seqs rows.
    bool all_rows = false;
  };
  // kNone: a rank other than 0 (its step's outputs are rank 0's to give).
  enum class Output { kLogits, kGreedy, kSampled, kNone };
  // How an attention layer's split-keys kernel splits its rows' keys in a step (rows 0: the
  // layer launches no such kernel).
  struct AttentionSplits {
    int64_t rows = 0;
    int32_t max_splits = 1;
  };
  AttentionSplits SplitsFor(const AttentionSpec& spec, const StepTable& t) const;

  absl::Status EnsureStepCapacity(int64_t rows, int64_t seqs, int64_t table_ints,
                                  int64_t partial_floats);
  absl::Status EnsureOutputCapacity(int64_t rows, Output output);
  absl::Status EnsurePenaltyCapacity(int64_t entries);
  // Checks that the chunks' KV block tables cover their positions (ValidateChunks checks the
  // ids).
  absl::Status CheckBlockTables(std::span<const SlotChunk> chunks) const;
  // The table's layout for `chunks`, padded to `padded_seqs` one-token sequences for a graph,
  // with `scored_rows` output rows beyond the sequences' last rows.
  StepTable BuildTable(std::span<const SlotChunk> chunks, bool all_rows, int64_t padded_seqs,
                       int64_t scored_rows);
  void FillTable(std::span<const SlotChunk> chunks, std::span<const TokenPick> picks,
                 const StepTable& t);
  absl::Status PrepareSampling(std::span<const TokenPick> picks, int64_t rows);
  // A step: its start (counters, embeddings) and layers [0, split), then layers [split, end)
  // and its end (head and output); a graph each when replayed (StepGraphs).
  absl::Status EnqueueStep(const StepTable& t, Output output);
  absl::Status EnqueueStepStart(const StepTable& t, size_t split);
  absl::Status EnqueueStepEnd(const StepTable& t, Output output, size_t split);
  absl::Status EnqueueLayer(const DeviceHybridLayer& layer, const StepTable& t);
  absl::Status EnqueueGka(const DeviceGkaLayer& layer, const StepTable& t);
  absl::Status EnqueueAttention(const DeviceAttentionLayer& layer, const StepTable& t);
  absl::Status RunStep(std::span<const SlotChunk> chunks, LogitsFor which, Output output,
                       std::span<const TokenPick> picks, int64_t* out_rows);

  int32_t* DeviceTable(int64_t offset) const { return table.as<int32_t>() + offset; }
};

}  // namespace ridge
