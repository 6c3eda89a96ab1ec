// A step of the CUDA backend: its table filled on the host, its kernels and products enqueued
// (capturable into a graph for decode buckets), run, and its solver counters merged.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/row_kernels.h"
#include "models/cuda/cuda_backend_impl.h"

namespace ridge {

absl::Status CudaBackend::Impl::Gemm(const void* x, int64_t rows, int64_t in, const DeviceBuffer& w,
                                     int64_t out, float* y, bool accumulate) {
  return WeightGemm({cublas, stream, sm_count}, x, rows, in, w.as<void>(), out, y, accumulate);
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
  // Scored rows (TokenPick::score_next) are output rows after the sequences' last rows.
  const int64_t scored_rows = all_rows ? 0 : ScoredRows(picks);
  const bool graphable =
      options.use_graphs && pure_decode && !all_rows && scored_rows == 0 && seqs <= kMaxGraphBatch;
  // A captured decode step runs a whole bucket; the padding sequences have no tokens.
  const int64_t padded = graphable ? GraphBucket(seqs) : seqs;
  const int64_t step_rows = graphable ? padded : rows;
  const int64_t out_rows = all_rows ? rows : padded + scored_rows;
  RETURN_IF_ERROR(EnsureCapacity(std::max(step_rows, out_rows), padded));
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
  if (scored_rows > 0) FillScoredOutRows(picks, row_of.data(), Host(kOutRow) + padded);
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

  if (graphable) {
    RETURN_IF_ERROR(
        graphs.Run({.batch = padded, .output = static_cast<int32_t>(output)}, stream,
                   [&] { return EnqueueStep(step_rows, padded, out_rows, false, output); }));
  } else {
    RETURN_IF_ERROR(EnqueueStep(step_rows, padded, out_rows, all_rows, output));
  }
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  for (const SlotChunk& chunk : chunks) slot_tokens[chunk.slot] += chunk.tokens.size();
  MergeCounters(chunks, order);
  *out_rows_result = all_rows ? rows : seqs + scored_rows;  // scored: never padded
  return absl::OkStatus();
}

void CudaBackend::Impl::MergeCounters(std::span<const SlotChunk> chunks,
                                      const std::vector<int64_t>& order) const {
  const auto* c = host_counters.as<const cuda::SolveCounters>();
  const int64_t heads = config.num_heads;
  for (size_t i = 0; i < order.size(); ++i) {
    SolverStats* stats = chunks[order[i]].stats;
    if (stats != nullptr) MergeSolveCounters(c + i * heads, heads, stats);
  }
}

}  // namespace ridge
