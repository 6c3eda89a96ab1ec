#include "models/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/few_rows_gemm.h"
#include "kernels/cuda/mesa_chunked_prefill.h"
#include "kernels/cuda/mesa_recurrence.h"
#include "kernels/cuda/row_kernels.h"
#include "kernels/cuda/token_sampling.h"
#include "models/cuda/device_memory.h"
#include "models/slot_packing.h"

namespace ridge {

using cuda::BufferRenewal;
using cuda::DeviceBuffer;
using cuda::PinnedBuffer;

namespace {

static_assert(cuda::kMaxSampledTopLogprobs == kMaxTopLogprobs,
              "the sampling kernel returns every alternative a pick may ask for");

// Decode steps are padded up to one of these batch sizes and replayed from a captured graph.
constexpr int64_t kGraphBuckets[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256};
constexpr int64_t kMaxGraphBatch = 256;
// GPU memory the state pool leaves free (at least; 5% of the GPU if that is more) for the step
// buffers and prefill scratch allocated after it.
constexpr int64_t kStepMemoryHeadroom = int64_t{1} << 30;

int64_t GraphBucket(int64_t n) {
  for (int64_t b : kGraphBuckets) {
    if (b >= n) return b;
  }
  return n;
}

int64_t RoundUpPow2(int64_t n) {
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
constexpr int64_t kProductWidthMultiple = 16;

// The largest weight matrix (elements) that products of few rows give to cuda::LaunchFewRowsGemm.
// cuBLAS streams larger ones faster (H200: the 1B config's in-projection, 7M elements, 6.4 us
// against 6.8 at 1 row and 8.7 at 16; its o_proj, 2.4M, 6.2 against 3.3 at 1 row).
constexpr int64_t kFewRowsMaxWeights = int64_t{4} << 20;

int64_t PaddedWidth(int64_t width) {
  return (width + kProductWidthMultiple - 1) / kProductWidthMultiple * kProductWidthMultiple;
}

// A row-major [rows, cols] matrix extended with zero rows to `padded_rows`.
std::vector<float> WithZeroRows(const std::vector<float>& m, int64_t padded_rows, int64_t cols) {
  std::vector<float> padded(m);
  padded.resize(padded_rows * cols, 0.0f);
  return padded;
}

absl::StatusOr<DeviceLayer> UploadLayer(const MesaLayerWeights& w, int64_t proj_stride,
                                        int64_t hidden_size) {
  DeviceLayer d;
  ASSIGN_OR_RETURN(d.attn_norm, cuda::UploadAsF32(w.attn_norm));
  ASSIGN_OR_RETURN(d.in_proj,
                   cuda::UploadAsBf16(WithZeroRows(w.in_proj, proj_stride, hidden_size)));
  ASSIGN_OR_RETURN(d.a_bias, cuda::UploadAsF32(w.a_bias));
  ASSIGN_OR_RETURN(d.b_bias, cuda::UploadAsF32(w.b_bias));
  ASSIGN_OR_RETURN(d.lambda, cuda::UploadAsF32(w.lambda));
  ASSIGN_OR_RETURN(d.q_conv, cuda::UploadAsF32(w.q_conv));
  ASSIGN_OR_RETURN(d.k_conv, cuda::UploadAsF32(w.k_conv));
  ASSIGN_OR_RETURN(d.o_norm, cuda::UploadAsF32(w.o_norm));
  ASSIGN_OR_RETURN(d.o_proj, cuda::UploadAsBf16(w.o_proj));
  ASSIGN_OR_RETURN(d.mlp_norm, cuda::UploadAsF32(w.mlp_norm));
  ASSIGN_OR_RETURN(d.gate_up_proj, cuda::UploadAsBf16(w.gate_up_proj));
  ASSIGN_OR_RETURN(d.down_proj, cuda::UploadAsBf16(w.down_proj));
  return d;
}

}  // namespace

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
  int64_t cap_penalties = 0;
  std::vector<int32_t> token_marks;  // [vocab], zero between steps: builds the penalty lists
  // Chunked prefill scratch, sized on demand (never used by captured graphs).
  int64_t cap_prefill_rows = 0, cap_chunks = 0;
  DeviceBuffer q_norm, k_norm, log_gamma, beta, chunk_states, handoff;

  // Captured decode steps by (bucket, output); a bucket is captured on its second use. A
  // bucket whose capture failed runs eagerly from then on.
  using GraphKey = std::pair<int64_t, StepOutput>;
  std::map<GraphKey, cudaGraphExec_t> graphs;
  std::map<GraphKey, int> bucket_uses;
  std::set<GraphKey> eager_buckets;

  ~Impl() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    for (auto& [key, exec] : graphs) cudaGraphExecDestroy(exec);
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

  // Drops the captured graphs (they point at buffers about to be replaced).
  void DropGraphs();
  absl::Status EnsureCapacity(int64_t rows, int64_t seqs);
  // Device logits for `rows` rows, and their host copy when the step returns them.
  absl::Status EnsureLogitsCapacity(int64_t rows, bool to_host);
  absl::Status EnsurePenaltyCapacity(int64_t entries);
  absl::Status Gemm(const void* x, int64_t rows, int64_t in, const DeviceBuffer& w, int64_t out,
                    float* y, bool accumulate);
  // Enqueues a whole step on `stream`, reading only the device table: capturable.
  absl::Status EnqueueStep(int64_t rows, int64_t seqs, int64_t out_rows, bool all_rows,
                           StepOutput output);
  // Captures the step into a graph, or returns the reason it could not.
  absl::StatusOr<cudaGraphExec_t> CaptureStep(int64_t rows, int64_t seqs, StepOutput output);
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

void CudaBackend::Impl::DropGraphs() {
  for (auto& [key, exec] : graphs) cudaGraphExecDestroy(exec);
  graphs.clear();
  bucket_uses.clear();
}

absl::Status CudaBackend::Impl::EnsureCapacity(int64_t rows, int64_t seqs) {
  if (rows <= cap_rows && seqs <= cap_seqs) return absl::OkStatus();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  const int64_t new_seqs = std::max(cap_seqs, seqs);
  const int64_t new_rows =
      std::max({cap_rows, RoundUpPow2(std::max<int64_t>(rows, 256)), new_seqs});
  const MesaNetConfig& c = config;
  const int64_t k = c.key_dim(), inter = c.intermediate_size;
  const size_t table_ints = TableIntsFor(new_rows, new_seqs);
  const size_t counter_bytes = new_seqs * c.num_heads * sizeof(cuda::SolveCounters);
  // All or nothing: if memory runs out, the old buffers (and the graphs using them) stay.
  BufferRenewal renew;
  RETURN_IF_ERROR(renew.Device(&table, table_ints * sizeof(int32_t)));
  RETURN_IF_ERROR(renew.Pinned(&host_table, table_ints * sizeof(int32_t)));
  RETURN_IF_ERROR(renew.Device(&hidden, new_rows * c.hidden_size * sizeof(float)));
  RETURN_IF_ERROR(renew.Device(&normed, new_rows * std::max(c.hidden_size, inter) * 2));
  RETURN_IF_ERROR(renew.Device(&proj, new_rows * proj_stride * sizeof(float)));
  RETURN_IF_ERROR(renew.Device(&attn, new_rows * k * 2));
  RETURN_IF_ERROR(renew.Device(&mlp, new_rows * 2 * inter * sizeof(float)));
  RETURN_IF_ERROR(renew.Device(&act, new_rows * inter * 2));
  RETURN_IF_ERROR(renew.Device(&final_normed, new_rows * c.hidden_size * 2));
  RETURN_IF_ERROR(renew.Device(&argmax, new_rows * sizeof(int32_t)));
  RETURN_IF_ERROR(renew.Pinned(&host_argmax, new_rows * sizeof(int32_t)));
  RETURN_IF_ERROR(renew.Device(&counters, counter_bytes));
  RETURN_IF_ERROR(renew.Pinned(&host_counters, counter_bytes));
  const size_t params_bytes = new_seqs * sizeof(cuda::SamplingRowParams);
  const size_t sampled_bytes = new_seqs * sizeof(cuda::SampledToken);
  RETURN_IF_ERROR(renew.Device(&sampling_params, params_bytes));
  RETURN_IF_ERROR(renew.Pinned(&host_sampling_params, params_bytes));
  RETURN_IF_ERROR(renew.Device(&sampled, sampled_bytes));
  RETURN_IF_ERROR(renew.Pinned(&host_sampled, sampled_bytes));
  DropGraphs();
  renew.Commit();
  cap_rows = new_rows;
  cap_seqs = new_seqs;
  return absl::OkStatus();
}

absl::Status CudaBackend::Impl::EnsureLogitsCapacity(int64_t rows, bool to_host) {
  // Logits never outlive a step, so the old buffers go before the new ones come (they can be
  // gigabytes when every row's logits are wanted); a failed allocation leaves them empty and
  // the next step tries again.
  const size_t bytes = rows * vocab_stride * sizeof(float);
  const bool device_fits = logits.bytes() >= bytes;
  const bool host_fits = !to_host || host_logits.bytes() >= bytes;
  if (device_fits && host_fits) return absl::OkStatus();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  // Captured graphs point at both buffers (the logits copy to the host is one of their nodes):
  // a graph kept across a reallocation would write into freed pinned memory.
  DropGraphs();
  if (!device_fits) RETURN_IF_ERROR(logits.Allocate(bytes));
  if (!host_fits) RETURN_IF_ERROR(host_logits.Allocate(bytes));
  return absl::OkStatus();
}

absl::Status CudaBackend::Impl::EnsurePenaltyCapacity(int64_t entries) {
  if (entries <= cap_penalties) return absl::OkStatus();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  const int64_t new_cap = RoundUpPow2(std::max<int64_t>(entries, 4096));
  BufferRenewal renew;
  RETURN_IF_ERROR(renew.Device(&penalties, new_cap * sizeof(cuda::PenaltyEntry)));
  RETURN_IF_ERROR(renew.Pinned(&host_penalties, new_cap * sizeof(cuda::PenaltyEntry)));
  DropGraphs();
  renew.Commit();
  cap_penalties = new_cap;
  return absl::OkStatus();
}

absl::Status CudaBackend::Impl::EnsurePrefillCapacity(int64_t rows, int64_t chunks) {
  if (rows <= cap_prefill_rows && chunks <= cap_chunks) return absl::OkStatus();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  // Scratch of one step only: freed before it is regrown (captured graphs never run prefill).
  // Until every buffer is allocated the capacities say zero, so a failure is retried.
  const MesaNetConfig& c = config;
  const int64_t new_rows = rows > cap_prefill_rows ? RoundUpPow2(rows) : cap_prefill_rows;
  const int64_t new_chunks = chunks > cap_chunks ? RoundUpPow2(chunks) : cap_chunks;
  if (new_rows != cap_prefill_rows) {
    cap_prefill_rows = 0;
    RETURN_IF_ERROR(q_norm.Allocate(new_rows * c.key_dim() * sizeof(float)));
    RETURN_IF_ERROR(k_norm.Allocate(new_rows * c.key_dim() * sizeof(float)));
    RETURN_IF_ERROR(log_gamma.Allocate(new_rows * c.num_heads * sizeof(float)));
    RETURN_IF_ERROR(beta.Allocate(new_rows * c.num_heads * sizeof(float)));
    cap_prefill_rows = new_rows;
  }
  if (new_chunks != cap_chunks) {
    cap_chunks = 0;
    RETURN_IF_ERROR(chunk_states.Allocate(new_chunks * c.num_heads * 2 * c.head_dim * c.head_dim *
                                          sizeof(float)));
    RETURN_IF_ERROR(handoff.Allocate(new_chunks * c.num_heads *
                                     cuda::MesaChunkedPrefillHandoffFloats(c.head_dim) *
                                     sizeof(float)));
    cap_chunks = new_chunks;
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Impl::Gemm(const void* x, int64_t rows, int64_t in, const DeviceBuffer& w,
                                     int64_t out, float* y, bool accumulate) {
  // Row-major y[rows, out] = x[rows, in] * w[out, in]^T. Steps of up to kFewRowsMax (32) rows
  // take the backend's own kernel for products of up to kFewRowsMaxWeights (1.1x to 2.5x
  // cuBLAS's speed there on an H200, tools/bench/RESULTS.md); everything else goes to cuBLAS,
  // seen column-major as y^T = w x^T.
  if (in * out <= kFewRowsMaxWeights && cuda::FewRowsGemmSupports(rows, out, in)) {
    const cuda::FewRowsGemmArgs args{x,
                                     w.as<void>(),
                                     y,
                                     static_cast<int32_t>(rows),
                                     static_cast<int32_t>(out),
                                     static_cast<int32_t>(in),
                                     static_cast<int32_t>(out),
                                     accumulate};
    RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchFewRowsGemm(args, sm_count, stream));
    return absl::OkStatus();
  }
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  RIDGE_CUBLAS_RETURN_IF_ERROR(
      cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(rows),
                   static_cast<int>(in), &alpha, w.as<void>(), CUDA_R_16BF, static_cast<int>(in), x,
                   CUDA_R_16BF, static_cast<int>(in), &beta, y, CUDA_R_32F, static_cast<int>(out),
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

absl::Status CudaBackend::Impl::EnqueueStep(int64_t rows, int64_t seqs, int64_t out_rows,
                                            bool all_rows, StepOutput output) {
  const MesaNetConfig& c = config;
  const int64_t hidden_size = c.hidden_size, k = c.key_dim(), inter = c.intermediate_size;
  const float eps = static_cast<float>(c.norm_eps);
  cudaStream_t s = stream;
  RIDGE_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(counters.as<void>(), 0, seqs * c.num_heads * sizeof(cuda::SolveCounters), s));
  RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchEmbedRows(Device(kIds), embeddings.as<void>(), rows,
                                                   hidden_size, hidden.as<float>(), s));
  cuda::MesaRecurrenceArgs args{};
  args.sequences = {
      Device(kSeqRowBegin),      Device(kSeqRowCount),
      Device(kSeqSlot),          reinterpret_cast<const float*>(Device(kSeqTolerance)),
      Device(kSeqMaxIterations), Device(kSeqJacobi)};
  args.num_sequences = static_cast<int32_t>(seqs - prefill_count);
  args.num_heads = static_cast<int32_t>(c.num_heads);
  args.head_dim = static_cast<int32_t>(c.head_dim);
  args.conv_size = static_cast<int32_t>(c.conv_size);
  args.output_gate = c.use_output_gate;
  args.norm_eps = eps;
  args.proj = proj.as<float>();
  args.proj_stride = static_cast<int32_t>(proj_stride);
  args.state_pool = state_pool.as<float>();
  args.slot_floats = slot_floats;
  args.layer_floats = layer_floats;
  args.out_bf16 = attn.as<void>();
  args.counters = counters.as<cuda::SolveCounters>();
  args.sm_count = sm_count;

  cuda::MesaPrefillArgs pre{};
  pre.table = {Device(kPreRowBegin),
               Device(kPreRowCount),
               Device(kPreSlot),
               reinterpret_cast<const float*>(Device(kPreTolerance)),
               Device(kPreMaxIterations),
               Device(kPreChunkBegin),
               Device(kChunkSequence),
               static_cast<int32_t>(prefill_count),
               static_cast<int32_t>(chunk_count)};
  pre.num_heads = args.num_heads;
  pre.head_dim = args.head_dim;
  pre.conv_size = args.conv_size;
  pre.output_gate = args.output_gate;
  pre.norm_eps = eps;
  pre.proj = args.proj;
  pre.proj_stride = args.proj_stride;
  pre.state_pool = args.state_pool;
  pre.slot_floats = slot_floats;
  pre.layer_floats = layer_floats;
  pre.q_norm = q_norm.as<float>();
  pre.k_norm = k_norm.as<float>();
  pre.log_gamma = log_gamma.as<float>();
  pre.beta = beta.as<float>();
  pre.chunk_states = chunk_states.as<float>();
  pre.handoff =
      cuda::PrefillHandsOff(chunk_count, c.num_heads, sm_count) ? handoff.as<float>() : nullptr;
  pre.out_bf16 = args.out_bf16;
  pre.counters = args.counters + args.num_sequences * c.num_heads;
  pre.solve_rows = cuda::PickSolveRows(Host(kPreRowCount), prefill_count, c.num_heads, sm_count);
  pre.chunk_state_rows = cuda::PickChunkStateRows(prefill_count, c.num_heads, c.head_dim, sm_count);
  // Only a step with a tolerance-0 prompt takes the solve kernel that can switch to f16 products;
  // the other one's 3xTF32 iterations are faster.
  const float* tolerances = reinterpret_cast<const float*>(Host(kPreTolerance));
  const bool any_full_budget = std::any_of(tolerances, tolerances + prefill_count,
                                           [](float tolerance) { return tolerance == 0.0f; });
  pre.single_pass_residual = any_full_budget ? options.prefill_single_pass_residual : 0.0f;

  for (size_t l = 0; l < layers.size(); ++l) {
    const DeviceLayer& w = layers[l];
    RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchRmsNormToBf16(hidden.as<float>(), nullptr,
                                                         w.attn_norm.as<float>(), rows, hidden_size,
                                                         eps, normed.as<void>(), s));
    RETURN_IF_ERROR(Gemm(normed.as<void>(), rows, hidden_size, w.in_proj, proj_stride,
                         proj.as<float>(), false));
    args.weights = {w.q_conv.as<float>(), w.k_conv.as<float>(), w.lambda.as<float>(),
                    w.a_bias.as<float>(), w.b_bias.as<float>(), w.o_norm.as<float>()};
    args.layer = static_cast<int32_t>(l);
    RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchMesaRecurrence(args, s));
    pre.weights = args.weights;
    pre.layer = args.layer;
    RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchMesaChunkedPrefill(pre, s));
    RETURN_IF_ERROR(
        Gemm(attn.as<void>(), rows, k, w.o_proj, hidden_size, hidden.as<float>(), true));
    RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchRmsNormToBf16(hidden.as<float>(), nullptr,
                                                         w.mlp_norm.as<float>(), rows, hidden_size,
                                                         eps, normed.as<void>(), s));
    RETURN_IF_ERROR(Gemm(normed.as<void>(), rows, hidden_size, w.gate_up_proj, 2 * inter,
                         mlp.as<float>(), false));
    RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchSwiGlu(mlp.as<float>(), rows, inter, act.as<void>(), s));
    RETURN_IF_ERROR(
        Gemm(act.as<void>(), rows, inter, w.down_proj, hidden_size, hidden.as<float>(), true));
  }
  RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchRmsNormToBf16(
      hidden.as<float>(), all_rows ? nullptr : Device(kOutRow), final_norm.as<float>(), out_rows,
      hidden_size, eps, final_normed.as<void>(), s));
  RETURN_IF_ERROR(Gemm(final_normed.as<void>(), out_rows, hidden_size,
                       lm_head.empty() ? embeddings : lm_head, vocab_stride, logits.as<float>(),
                       false));
  switch (output) {
    case StepOutput::kGreedy:
      RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchArgmaxRows(logits.as<float>(), out_rows, c.vocab_size,
                                                        vocab_stride, argmax.as<int32_t>(), s));
      RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_argmax.as<void>(), argmax.as<void>(),
                                                 out_rows * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                                 s));
      break;
    case StepOutput::kSampled: {
      cuda::TokenSamplingArgs sampling{};
      sampling.logits = logits.as<float>();
      sampling.row_stride = vocab_stride;
      sampling.vocab_size = static_cast<int32_t>(c.vocab_size);
      sampling.num_rows = static_cast<int32_t>(out_rows);
      sampling.params = sampling_params.as<cuda::SamplingRowParams>();
      sampling.penalties = penalties.as<cuda::PenaltyEntry>();
      sampling.out = sampled.as<cuda::SampledToken>();
      RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchTokenSampling(sampling, s));
      RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_sampled.as<void>(), sampled.as<void>(),
                                                 out_rows * sizeof(cuda::SampledToken),
                                                 cudaMemcpyDeviceToHost, s));
      break;
    }
    case StepOutput::kLogits:
      RIDGE_CUDA_RETURN_IF_ERROR(
          cudaMemcpy2DAsync(host_logits.as<void>(), c.vocab_size * sizeof(float), logits.as<void>(),
                            vocab_stride * sizeof(float), c.vocab_size * sizeof(float), out_rows,
                            cudaMemcpyDeviceToHost, s));
      break;
  }
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_counters.as<void>(), counters.as<void>(),
                                             seqs * c.num_heads * sizeof(cuda::SolveCounters),
                                             cudaMemcpyDeviceToHost, s));
  return absl::OkStatus();
}

absl::Status CudaBackend::Impl::RunStep(std::span<const SlotChunk> chunks, LogitsFor which,
                                        StepOutput output, std::span<const TokenPick> picks,
                                        int64_t* out_rows_result) {
  // A step that failed half-way may have left work queued that reads the host table.
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  int64_t rows = 0;
  bool pure_decode = true;
  for (const SlotChunk& chunk : chunks) {
    rows += static_cast<int64_t>(chunk.tokens.size());
    pure_decode = pure_decode && chunk.tokens.size() == 1 && chunk.phase == SolvePhase::kDecode;
  }
  const int64_t seqs = static_cast<int64_t>(chunks.size());
  const bool all_rows = which == LogitsFor::kAllTokens;
  const bool graphable = options.use_graphs && pure_decode && !all_rows && seqs <= kMaxGraphBatch;
  // A captured decode step runs a whole bucket; the padding sequences have no tokens.
  const int64_t padded = graphable ? GraphBucket(seqs) : seqs;
  const int64_t step_rows = graphable ? padded : rows;
  const int64_t out_rows = all_rows ? rows : padded;
  RETURN_IF_ERROR(EnsureCapacity(step_rows, padded));
  RETURN_IF_ERROR(EnsureLogitsCapacity(out_rows, output == StepOutput::kLogits));
  if (output == StepOutput::kSampled) RETURN_IF_ERROR(PrepareSampling(picks, out_rows));

  // Fill the table on the host, then send it in one copy. Long prompts run chunked; decode
  // tokens and short prompts token by token.
  auto runs_chunked = [&](const SlotChunk& chunk) {
    return chunk.phase == SolvePhase::kPrefill &&
           static_cast<int64_t>(chunk.tokens.size()) >= options.chunked_prefill_min_tokens;
  };
  std::vector<int64_t> order;
  for (int64_t i = 0; i < seqs; ++i) {
    if (!runs_chunked(chunks[i])) order.push_back(i);
  }
  sequential_count = static_cast<int64_t>(order.size());
  int64_t prefill_rows = 0;
  chunk_count = 0;
  for (int64_t i = 0; i < seqs; ++i) {
    if (!runs_chunked(chunks[i])) continue;
    order.push_back(i);
    prefill_rows += static_cast<int64_t>(chunks[i].tokens.size());
    chunk_count += (static_cast<int64_t>(chunks[i].tokens.size()) + cuda::kPrefillChunk - 1) /
                   cuda::kPrefillChunk;
  }
  prefill_count = seqs - sequential_count;
  if (prefill_count > 0) RETURN_IF_ERROR(EnsurePrefillCapacity(rows, chunk_count));

  int32_t* t = host_table.as<int32_t>();
  std::memset(t, 0, TableInts() * sizeof(int32_t));
  std::vector<int32_t> row_of(seqs);
  int64_t row = 0;
  for (int64_t i = 0; i < seqs; ++i) {  // rows in the caller's order
    row_of[i] = static_cast<int32_t>(row);
    for (int32_t token : chunks[i].tokens) Host(kIds)[row++] = token;
    Host(kOutRow)[i] = static_cast<int32_t>(row - 1);
  }
  for (int64_t p = 0; p < sequential_count; ++p) {
    const SlotChunk& chunk = chunks[order[p]];
    Host(kSeqRowBegin)[p] = row_of[order[p]];
    Host(kSeqRowCount)[p] = static_cast<int32_t>(chunk.tokens.size());
    Host(kSeqSlot)[p] = static_cast<int32_t>(chunk.slot);
    reinterpret_cast<float*>(Host(kSeqTolerance))[p] = chunk.solver.tolerance;
    Host(kSeqMaxIterations)[p] = chunk.solver.max_iterations;
    Host(kSeqJacobi)[p] = chunk.phase == SolvePhase::kDecode ? 1 : 0;
  }
  for (int64_t p = seqs; p < padded; ++p) {  // padding: one dummy row each, no state touched
    Host(kSeqRowBegin)[p] = static_cast<int32_t>(p);
    Host(kOutRow)[p] = static_cast<int32_t>(p);
  }
  int32_t chunk_index = 0;
  for (int64_t q = 0; q < prefill_count; ++q) {
    const SlotChunk& chunk = chunks[order[sequential_count + q]];
    const int32_t count = static_cast<int32_t>(chunk.tokens.size());
    Host(kPreRowBegin)[q] = row_of[order[sequential_count + q]];
    Host(kPreRowCount)[q] = count;
    Host(kPreSlot)[q] = static_cast<int32_t>(chunk.slot);
    reinterpret_cast<float*>(Host(kPreTolerance))[q] = chunk.solver.tolerance;
    Host(kPreMaxIterations)[q] = chunk.solver.max_iterations;
    Host(kPreChunkBegin)[q] = chunk_index;
    for (int32_t start = 0; start < count; start += cuda::kPrefillChunk) {
      Host(kChunkSequence)[chunk_index++] = static_cast<int32_t>(q);
    }
  }
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(table.as<void>(), t, TableInts() * sizeof(int32_t),
                                             cudaMemcpyHostToDevice, stream));

  const GraphKey key(padded, output);
  if (graphable && !eager_buckets.contains(key)) {
    auto it = graphs.find(key);
    if (it == graphs.end() && ++bucket_uses[key] >= 2) {
      absl::StatusOr<cudaGraphExec_t> exec = CaptureStep(step_rows, padded, output);
      if (exec.ok()) {
        it = graphs.emplace(key, *exec).first;
      } else {
        eager_buckets.insert(key);  // run this bucket eagerly rather than retry every step
      }
    }
    if (it != graphs.end()) {
      RIDGE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, stream));
    } else {
      RETURN_IF_ERROR(EnqueueStep(step_rows, padded, out_rows, false, output));
    }
  } else {
    RETURN_IF_ERROR(EnqueueStep(step_rows, padded, out_rows, all_rows, output));
  }
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  for (const SlotChunk& chunk : chunks) slot_tokens[chunk.slot] += chunk.tokens.size();
  MergeCounters(chunks, order);
  *out_rows_result = all_rows ? rows : seqs;
  return absl::OkStatus();
}

absl::StatusOr<cudaGraphExec_t> CudaBackend::Impl::CaptureStep(int64_t rows, int64_t seqs,
                                                               StepOutput output) {
  cudaGraph_t graph = nullptr;
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status enqueued = EnqueueStep(rows, seqs, seqs, false, output);
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (!enqueued.ok() || ended != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // a failed capture is not sticky; the eager path runs next
    return enqueued.ok() ? cuda::CudaStatus(ended, "cudaStreamEndCapture") : enqueued;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (instantiated != cudaSuccess) {
    cudaGetLastError();
    return cuda::CudaStatus(instantiated, "cudaGraphInstantiate");
  }
  return exec;
}

absl::Status CudaBackend::Impl::PrepareSampling(std::span<const TokenPick> picks, int64_t rows) {
  // The picks were checked by ValidatePicks.
  const int32_t vocab = static_cast<int32_t>(config.vocab_size);
  if (token_marks.empty()) token_marks.assign(vocab, 0);
  auto* params = host_sampling_params.as<cuda::SamplingRowParams>();
  std::memset(params, 0, rows * sizeof(cuda::SamplingRowParams));  // padding rows: greedy
  std::vector<cuda::PenaltyEntry> entries;
  for (size_t i = 0; i < picks.size(); ++i) {
    const TokenPick& pick = picks[i];
    if (pick.sampler == nullptr) continue;
    const SamplingParams& p = pick.sampler->params();
    cuda::SamplingRowParams& row = params[i];
    row.temperature = p.temperature;
    row.top_k = p.top_k;
    row.top_p = p.top_p;
    row.min_p = p.min_p;
    row.repetition_penalty = p.repetition_penalty;
    row.presence_penalty = p.presence_penalty;
    row.frequency_penalty = p.frequency_penalty;
    row.logprobs = pick.logprobs ? 1 : 0;
    row.top_logprobs = pick.logprobs ? pick.top_logprobs : 0;
    row.uniform = pick.uniform;
    row.penalty_begin = static_cast<int32_t>(entries.size());
    // One entry per distinct token: the generated ones with their counts, then (only when the
    // repetition penalty is on) the prompt's other tokens.
    const bool repetition = p.repetition_penalty != 1.0f;
    if (repetition || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
      for (int32_t token : pick.generated) ++token_marks[token];
      for (int32_t token : pick.generated) {
        if (token_marks[token] <= 0) continue;
        entries.push_back({token, token_marks[token]});
        token_marks[token] = -1;  // listed
      }
      if (repetition) {
        for (int32_t token : pick.prompt) {
          if (token_marks[token] != 0) continue;
          entries.push_back({token, 0});
          token_marks[token] = -1;
        }
      }
      for (int32_t token : pick.generated) token_marks[token] = 0;
      for (int32_t token : pick.prompt) token_marks[token] = 0;
    }
    row.penalty_count = static_cast<int32_t>(entries.size()) - row.penalty_begin;
  }
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sampling_params.as<void>(), params,
                                             rows * sizeof(cuda::SamplingRowParams),
                                             cudaMemcpyHostToDevice, stream));
  if (!entries.empty()) {
    RETURN_IF_ERROR(EnsurePenaltyCapacity(static_cast<int64_t>(entries.size())));
    std::memcpy(host_penalties.as<void>(), entries.data(),
                entries.size() * sizeof(cuda::PenaltyEntry));
    RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(penalties.as<void>(), host_penalties.as<void>(),
                                               entries.size() * sizeof(cuda::PenaltyEntry),
                                               cudaMemcpyHostToDevice, stream));
  }
  return absl::OkStatus();
}

void CudaBackend::Impl::MergeCounters(std::span<const SlotChunk> chunks,
                                      const std::vector<int64_t>& order) const {
  const auto* c = host_counters.as<const cuda::SolveCounters>();
  const int64_t heads = config.num_heads;
  for (size_t i = 0; i < order.size(); ++i) {
    SolverStats* stats = chunks[order[i]].stats;
    if (stats == nullptr) continue;
    for (int64_t h = 0; h < heads; ++h) {
      const cuda::SolveCounters& x = c[i * heads + h];
      SolverStats s;
      s.solves = x.solves;
      s.total_iterations = x.total_iterations;
      s.max_iterations = x.max_iterations;
      s.capped = x.capped;
      s.sum_relative_residual = x.sum_residual;
      s.max_relative_residual = x.max_residual;
      stats->Merge(s);
    }
  }
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const MesaNetConfig& config, const MesaNetWeights& weights, const CudaBackendOptions& options) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError("no CUDA device is available");
  }
  if (options.device < 0 || options.device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", options.device, " does not exist (", devices, " found)"));
  }
  if (!cuda::MesaRecurrenceSupports(static_cast<int>(config.head_dim),
                                    static_cast<int>(config.conv_size))) {
    return absl::UnimplementedError(absl::StrCat(
        "the CUDA backend supports head_dim 64 or 128 and conv_size 1 to ", cuda::kMaxConvSize,
        "; this model has head_dim ", config.head_dim, " and conv_size ", config.conv_size));
  }
  if (options.num_slots < 1) return absl::InvalidArgumentError("the CUDA backend needs >= 1 slot");
  if (options.chunked_prefill_min_tokens < 1) {
    return absl::InvalidArgumentError("the chunked prefill's minimum prompt piece must be >= 1");
  }
  if (!(options.prefill_single_pass_residual >= 0.0f &&
        options.prefill_single_pass_residual <= 1.0f)) {
    return absl::InvalidArgumentError(
        "the chunked prefill's single-pass residual must be from 0 to 1");
  }
  cudaDeviceProp prop{};
  RIDGE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options.device));
  if (prop.major < 9) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", options.device, " (", prop.name, ") has compute capability ",
                     prop.major, ".", prop.minor, "; the kernels need 9.0 (Hopper) or newer"));
  }
  const size_t prefill_smem =
      cuda::MesaChunkedPrefillSharedBytes(static_cast<int>(config.head_dim));
  const size_t sampling_smem = cuda::TokenSamplingSharedBytes(static_cast<int>(config.vocab_size));
  if (prop.sharedMemPerBlockOptin < std::max(prefill_smem, sampling_smem)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", options.device, " (", prop.name, ") offers ", prop.sharedMemPerBlockOptin,
        " bytes of shared memory per block; the prefill kernel needs ", prefill_smem,
        " and the sampling kernel ", sampling_smem));
  }
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));

  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->spec = ToModelSpec(config);
  impl->options = options;
  impl->sm_count = prop.multiProcessorCount;
  const int64_t c = config.hidden_size;
  const int64_t proj_width = static_cast<int64_t>(weights.layers.at(0).in_proj.size()) / c;
  const int64_t expected_width =
      cuda::DecayGateColumn(static_cast<int32_t>(config.num_heads),
                            static_cast<int32_t>(config.head_dim), config.use_output_gate) +
      2 * config.num_heads;
  if (proj_width != expected_width) {
    return absl::InvalidArgumentError(absl::StrCat(
        "in-projection has ", proj_width, " output columns; the config implies ", expected_width));
  }
  impl->proj_stride = PaddedWidth(proj_width);
  impl->layer_floats = SlotShape::Of(config).packed_layer_floats();
  impl->slot_floats = impl->layer_floats * config.num_hidden_layers;

  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  RIDGE_CUBLAS_RETURN_IF_ERROR(cublasCreate(&impl->cublas));
  RIDGE_CUBLAS_RETURN_IF_ERROR(cublasSetStream(impl->cublas, impl->stream));
  RETURN_IF_ERROR(impl->cublas_workspace.Allocate(kCublasWorkspaceBytes));
  RIDGE_CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(impl->cublas, impl->cublas_workspace.as<void>(),
                                                  impl->cublas_workspace.bytes()));

  impl->vocab_stride = PaddedWidth(config.vocab_size);
  auto padded_output_matrix = [&](const std::vector<float>& m) {
    return WithZeroRows(m, impl->vocab_stride, c);
  };
  if (weights.lm_head.empty()) {  // tied: one padded table serves both ends
    ASSIGN_OR_RETURN(impl->embeddings,
                     cuda::UploadAsBf16(padded_output_matrix(weights.embeddings)));
  } else {
    ASSIGN_OR_RETURN(impl->embeddings, cuda::UploadAsBf16(weights.embeddings));
    ASSIGN_OR_RETURN(impl->lm_head, cuda::UploadAsBf16(padded_output_matrix(weights.lm_head)));
  }
  ASSIGN_OR_RETURN(impl->final_norm, cuda::UploadAsF32(weights.final_norm));
  int64_t bytes = impl->embeddings.bytes() + impl->lm_head.bytes() + impl->final_norm.bytes();
  for (const MesaLayerWeights& w : weights.layers) {
    ASSIGN_OR_RETURN(DeviceLayer layer, UploadLayer(w, impl->proj_stride, c));
    for (const DeviceBuffer* b :
         {&layer.attn_norm, &layer.in_proj, &layer.a_bias, &layer.b_bias, &layer.lambda,
          &layer.q_conv, &layer.k_conv, &layer.o_norm, &layer.o_proj, &layer.mlp_norm,
          &layer.gate_up_proj, &layer.down_proj}) {
      bytes += b->bytes();
    }
    impl->layers.push_back(std::move(layer));
  }
  impl->weight_bytes = bytes;

  // The pool takes what the weights left, less room for the step buffers and the prefill
  // scratch that are sized on demand later: a pool that filled the GPU would turn the first
  // long prompt into a failed step. More slots than fit are clamped (as the host clamps the CPU
  // backend's), with a warning.
  const int64_t slot_bytes = impl->slot_floats * static_cast<int64_t>(sizeof(float));
  size_t free_bytes = 0, total_bytes = 0;
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t headroom =
      std::max<int64_t>(kStepMemoryHeadroom, static_cast<int64_t>(total_bytes) / 20);
  const int64_t fit = (static_cast<int64_t>(free_bytes) - headroom) / slot_bytes;
  if (fit < 1) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no state slot of ", slot_bytes, " bytes fits in the GPU's ", free_bytes,
        " free bytes after the weights, keeping ", headroom, " bytes for step buffers"));
  }
  if (impl->options.num_slots > fit) {
    Log(LogLevel::kWarning, impl->options.num_slots, " state slots of ", slot_bytes,
        " bytes do not fit in the GPU's ", free_bytes, " free bytes after the weights (keeping ",
        headroom, " for step buffers); using ", fit);
    impl->options.num_slots = fit;
  }
  const size_t pool_bytes = impl->options.num_slots * slot_bytes;
  if (const absl::Status pool = impl->state_pool.Allocate(pool_bytes); !pool.ok()) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(absl::StrCat(
        impl->options.num_slots, " state slots of ", slot_bytes, " bytes (", pool_bytes,
        " bytes in all) could not be allocated; use fewer --slots (", pool.message(), ")"));
  }
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemset(impl->state_pool.as<void>(), 0, impl->state_pool.bytes()));
  impl->slot_tokens.assign(impl->options.num_slots, 0);
  RETURN_IF_ERROR(
      impl->EnsureCapacity(256, GraphBucket(std::min(impl->options.num_slots, kMaxGraphBatch))));
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(impl)));
}

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBackend::~CudaBackend() = default;

const MesaNetConfig& CudaBackend::config() const { return impl_->config; }
const ModelSpec& CudaBackend::spec() const { return impl_->spec; }
const KvLayout& CudaBackend::kv_layout() const { return impl_->kv_layout; }
int64_t CudaBackend::SlotPosition(int64_t slot) const { return impl_->slot_tokens.at(slot); }
int64_t CudaBackend::num_slots() const { return impl_->options.num_slots; }
int64_t CudaBackend::weight_bytes() const { return impl_->weight_bytes; }
int64_t CudaBackend::state_bytes_per_slot() const { return impl_->slot_floats * sizeof(float); }

// About three waves of the prefill solve (one block per chunk and head, one block per SM): 4224
// tokens for 140M on an H200, half that for 1B's twice as many heads. Served on an H200 (140M,
// 128-token prompts, 64 new tokens, tools/gpu/serve_check.py), budgets of 512, 1536, 4096 and
// 16384 tokens gave 16.7k, 20.5k, 23.1k and 21.7k tokens/s at 64 concurrent streams (inter-event
// p90 94, 30, 27, 31 ms) and 19.0k, 25.4k, 31.0k, 31.4k at 256: larger budgets add waves, and
// every decoding sequence waits for them.
int64_t CudaBackend::preferred_prefill_tokens_per_step() const {
  constexpr int64_t kSolveWaves = 3, kMinimum = 512;
  const int64_t chunks = kSolveWaves * impl_->sm_count / impl_->config.num_heads;
  return std::max(kMinimum, chunks * cuda::kPrefillChunk);
}

absl::Status CudaBackend::ResetSlot(int64_t slot) {
  RETURN_IF_ERROR(CheckSlot(slot));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  const size_t bytes = impl_->slot_floats * sizeof(float);
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      impl_->state_pool.as<float>() + slot * impl_->slot_floats, 0, bytes, impl_->stream));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  impl_->slot_tokens[slot] = 0;
  return absl::OkStatus();
}

absl::Status CudaBackend::Forward(std::span<const SlotChunk> chunks, LogitsFor which,
                                  std::vector<float>* logits) {
  RETURN_IF_ERROR(ValidateChunks(chunks));
  if (chunks.empty()) {
    logits->clear();
    return absl::OkStatus();
  }
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  int64_t out_rows = 0;
  RETURN_IF_ERROR(impl_->RunStep(chunks, which, StepOutput::kLogits, {}, &out_rows));
  const int64_t vocab = impl_->config.vocab_size;
  logits->resize(out_rows * vocab);
  std::memcpy(logits->data(), impl_->host_logits.as<float>(), out_rows * vocab * sizeof(float));
  return absl::OkStatus();
}

absl::Status CudaBackend::ForwardGreedy(std::span<const SlotChunk> chunks,
                                        std::vector<int32_t>* next_tokens) {
  RETURN_IF_ERROR(ValidateChunks(chunks));
  next_tokens->clear();
  if (chunks.empty()) return absl::OkStatus();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  int64_t out_rows = 0;
  RETURN_IF_ERROR(
      impl_->RunStep(chunks, LogitsFor::kLastToken, StepOutput::kGreedy, {}, &out_rows));
  const int32_t* best = impl_->host_argmax.as<int32_t>();
  next_tokens->assign(best, best + out_rows);
  return absl::OkStatus();
}

absl::Status CudaBackend::ForwardSample(std::span<const SlotChunk> chunks,
                                        std::span<const TokenPick> picks,
                                        std::vector<PickedToken>* picked) {
  RETURN_IF_ERROR(ValidateChunks(chunks));
  RETURN_IF_ERROR(ValidatePicks(chunks, picks));
  picked->assign(chunks.size(), PickedToken{});
  if (chunks.empty()) return absl::OkStatus();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  int64_t out_rows = 0;
  RETURN_IF_ERROR(
      impl_->RunStep(chunks, LogitsFor::kLastToken, StepOutput::kSampled, picks, &out_rows));
  const auto* sampled = impl_->host_sampled.as<const cuda::SampledToken>();
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (picks[i].sampler == nullptr) continue;
    const cuda::SampledToken& from = sampled[i];
    PickedToken& to = (*picked)[i];
    to.token = from.token;
    if (!picks[i].logprobs) continue;
    to.logprob = from.logprob;
    for (int32_t n = 0; n < picks[i].top_logprobs && from.top_tokens[n] >= 0; ++n) {
      to.top.emplace_back(from.top_tokens[n], from.top_logprobs[n]);
    }
  }
  return absl::OkStatus();
}

// The pool keeps Hs packed (kernels/mesa_slot_layout.h); MesaState keeps it whole.
absl::Status CudaBackend::ReadSlot(int64_t slot, MesaState* state) const {
  RETURN_IF_ERROR(CheckSlot(slot));
  const SlotShape shape = SlotShape::Of(impl_->config);
  if (static_cast<int64_t>(state->data().size()) != shape.layers * shape.state_layer_floats()) {
    return absl::InvalidArgumentError("state of another model");
  }
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  std::vector<float> packed(impl_->slot_floats);
  RIDGE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(packed.data(), impl_->state_pool.as<float>() + slot * impl_->slot_floats,
                      impl_->slot_floats * sizeof(float), cudaMemcpyDeviceToHost, impl_->stream));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  state->Reset();
  UnpackSlot(shape, packed, state->mutable_data());
  state->AddTokens(impl_->slot_tokens[slot]);
  return absl::OkStatus();
}

absl::Status CudaBackend::WriteSlot(int64_t slot, const MesaState& state) {
  RETURN_IF_ERROR(CheckSlot(slot));
  const SlotShape shape = SlotShape::Of(impl_->config);
  if (static_cast<int64_t>(state.data().size()) != shape.layers * shape.state_layer_floats()) {
    return absl::InvalidArgumentError("state of another model");
  }
  std::vector<float> packed(impl_->slot_floats);
  PackSlot(shape, state.data(), packed);
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  // On the backend's stream (created non-blocking, so a plain cudaMemcpy on the legacy stream is
  // not ordered with its steps, and a pageable host-to-device copy may return before it lands).
  RIDGE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(impl_->state_pool.as<float>() + slot * impl_->slot_floats, packed.data(),
                      impl_->slot_floats * sizeof(float), cudaMemcpyHostToDevice, impl_->stream));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  impl_->slot_tokens[slot] = state.tokens();
  return absl::OkStatus();
}

absl::Status CudaBackend::CopySlot(int64_t from, int64_t to) {
  RETURN_IF_ERROR(CheckSlot(from));
  RETURN_IF_ERROR(CheckSlot(to));
  if (from == to) return absl::OkStatus();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  float* pool = impl_->state_pool.as<float>();
  RIDGE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(pool + to * impl_->slot_floats, pool + from * impl_->slot_floats,
                      impl_->slot_floats * sizeof(float), cudaMemcpyDeviceToDevice, impl_->stream));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  impl_->slot_tokens[to] = impl_->slot_tokens[from];
  return absl::OkStatus();
}

}  // namespace ridge
