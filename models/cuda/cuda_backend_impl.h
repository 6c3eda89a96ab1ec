// The CUDA backend's internals, shared by its translation units: cuda_backend.cc (creation, the
// public calls, slot I/O), cuda_backend_buffers.cc (step buffers), cuda_backend_step.cc (a step
// enqueued, captured and run) and cuda_backend_sampling.cc (picking tokens on the device). Not
// for use outside models/cuda.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <span>
#include <vector>

#include "kernels/cuda/mesa_chunked_prefill.h"
#include "kernels/cuda/mesa_recurrence.h"
#include "kernels/cuda/token_sampling.h"
#include "models/cuda/cuda_backend.h"
#include "models/cuda/device_memory.h"
#include "models/cuda/device_step_support.h"
#include "models/cuda/step_graphs.h"

namespace ridge {

using cuda::BufferRenewal;
using cuda::DeviceBuffer;
using cuda::PinnedBuffer;

static_assert(cuda::kMaxSampledTopLogprobs == kMaxTopLogprobs,
              "the sampling kernel returns every alternative a pick may ask for");

// GPU memory the state pool leaves free (at least; 5% of the GPU if that is more) for the step
// buffers and prefill scratch allocated after it.
inline constexpr int64_t kStepMemoryHeadroom = int64_t{1} << 30;

inline int64_t RoundUpPow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// What a step leaves for the host: full logits rows, each row's argmax, or each row's token
// picked on the device by its sampling parameters.
enum class StepOutput { kLogits, kGreedy, kSampled };

struct DeviceLayer {
  DeviceBuffer attn_norm, in_proj, a_bias, b_bias, lambda, q_conv, k_conv, o_norm, o_proj, mlp_norm,
      gate_up_proj, down_proj;
};

// Output widths of the products (the in-projection's columns, the vocabulary) are rounded up to
// this many columns with zero weight rows: cuBLAS picks kernels 2x (in-projection, 2316 -> 2320
// columns) to 6x (output layer, 50257 -> 50272) slower for widths that are not multiples of 8
// (H200, tools/bench/RESULTS.md). Nothing reads the padding columns of the outputs.
inline constexpr int64_t kProductWidthMultiple = 16;

inline int64_t PaddedWidth(int64_t width) {
  return (width + kProductWidthMultiple - 1) / kProductWidthMultiple * kProductWidthMultiple;
}

struct CudaBackend::Impl {
  MesaNetConfig config;
  ModelSpec spec;
  KvLayout kv_layout;  // empty: MesaNet has no attention layers
  CudaBackendOptions options;
  int64_t layer_floats = 0, slot_floats = 0;
  // Row strides of the in-projection's output and of the logits: their widths rounded up by
  // PaddedWidth.
  int64_t proj_stride = 0, vocab_stride = 0;
  int64_t weight_bytes = 0;
  int32_t sm_count = 0;  // the device's multiprocessors (the decode kernel's block shape)

  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  DeviceBuffer cublas_workspace;
  DeviceBuffer embeddings, lm_head, final_norm;
  std::vector<DeviceLayer> layers;
  DeviceBuffer state_pool;
  std::vector<int64_t> slot_tokens;

  // Step buffers sized for cap_rows token rows and cap_seqs sequences. One int32 table, sent
  // in one copy per step, holds every per-step array at a fixed offset (Segment), so captured
  // graphs keep pointing at the right place.
  int64_t cap_rows = 0, cap_seqs = 0;
  DeviceBuffer table, hidden, normed, proj, attn, mlp, act, final_normed, logits, argmax, counters;
  PinnedBuffer host_table, host_logits, host_argmax, host_counters;
  // Device sampling: per-row parameters and picks [cap_seqs], penalty entries [cap_penalties].
  DeviceBuffer sampling_params, sampled, penalties;
  PinnedBuffer host_sampling_params, host_sampled, host_penalties;
  // The logits of a sampled step's rows that are picked on the host (PickRowsOnHost).
  PinnedBuffer host_pick_logits;
  int64_t cap_penalties = 0;
  std::vector<int32_t> token_marks;  // [vocab], zero between steps: builds the penalty lists
  // Chunked prefill scratch, sized on demand (never used by captured graphs).
  int64_t cap_prefill_rows = 0, cap_chunks = 0;
  DeviceBuffer q_norm, k_norm, log_gamma, beta, chunk_states, handoff;

  // Captured decode steps by (bucket, output).
  StepGraphs graphs{kMaxStepGraphs};

  ~Impl() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    if (cublas != nullptr) cublasDestroy(cublas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  enum Segment {
    kIds,     // [rows] token ids
    kOutRow,  // [rows] row whose logits are wanted, per output row
    // Sequences advanced token by token (decode, short prompts) [seqs each]:
    kSeqRowBegin,
    kSeqRowCount,
    kSeqSlot,
    kSeqTolerance,
    kSeqMaxIterations,
    kSeqJacobi,
    // Prompts run in chunks [seqs each], and the sequence of every chunk [chunks]:
    kPreRowBegin,
    kPreRowCount,
    kPreSlot,
    kPreTolerance,
    kPreMaxIterations,
    kPreChunkBegin,
    kChunkSequence,
    kSegments
  };
  static int64_t MaxChunks(int64_t rows, int64_t seqs) { return rows / cuda::kPrefillChunk + seqs; }
  static int64_t SegmentOffset(int segment, int64_t rows, int64_t seqs) {
    if (segment <= kOutRow) return segment * rows;
    return 2 * rows + (segment - kSeqRowBegin) * seqs;
  }
  static size_t TableIntsFor(int64_t rows, int64_t seqs) {
    return static_cast<size_t>(SegmentOffset(kChunkSequence, rows, seqs) + MaxChunks(rows, seqs));
  }
  int64_t SegmentOffset(int segment) const { return SegmentOffset(segment, cap_rows, cap_seqs); }
  int32_t* Device(int segment) const { return table.as<int32_t>() + SegmentOffset(segment); }
  int32_t* Host(int segment) const { return host_table.as<int32_t>() + SegmentOffset(segment); }
  size_t TableInts() const { return TableIntsFor(cap_rows, cap_seqs); }

  absl::Status EnsureCapacity(int64_t rows, int64_t seqs);
  // Device logits for `rows` rows, and their host copy when the step returns them.
  absl::Status EnsureLogitsCapacity(int64_t rows, bool to_host);
  absl::Status EnsurePenaltyCapacity(int64_t entries);
  absl::Status Gemm(const void* x, int64_t rows, int64_t in, const DeviceBuffer& w, int64_t out,
                    float* y, bool accumulate);
  // Enqueues a whole step on `stream`, reading only the device table: capturable.
  absl::Status EnqueueStep(int64_t rows, int64_t seqs, int64_t out_rows, bool all_rows,
                           StepOutput output);
  // `picks` (one per chunk) only with StepOutput::kSampled.
  absl::Status RunStep(std::span<const SlotChunk> chunks, LogitsFor which, StepOutput output,
                       std::span<const TokenPick> picks, int64_t* out_rows);
  // Fills the per-row sampling parameters and penalty entries for a sampled step of `rows`
  // output rows (the chunks' rows, then padding).
  absl::Status PrepareSampling(std::span<const TokenPick> picks, int64_t rows);
  absl::Status EnsurePrefillCapacity(int64_t rows, int64_t chunks);
  // order[p]: the chunk at table position p (token-by-token sequences first, then prompts).
  void MergeCounters(std::span<const SlotChunk> chunks, const std::vector<int64_t>& order) const;
  int64_t sequential_count = 0, prefill_count = 0, chunk_count = 0;  // of the step being built
};

}  // namespace ridge
