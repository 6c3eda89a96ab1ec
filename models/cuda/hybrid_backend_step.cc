// A step of the CUDA hybrid backend: its table built on the host and sent in one copy, its
// buffers grown, its layers enqueued (a product, then one launch per mixer stage, per layer),
// its outputs copied back and its solver counters merged.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/causal_conv.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gka_recurrence.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/qk_rope.h"
#include "kernels/cuda/row_kernels.h"
#include "kernels/gka_slot_layout.h"
#include "models/cuda/hybrid_backend_impl.h"

namespace ridge {

absl::Status CudaHybridBackend::Impl::EnsureStepCapacity(int64_t rows, int64_t seqs,
                                                         int64_t table_ints,
                                                         int64_t partial_floats) {
  if (rows > cap_rows || seqs > cap_seqs) {
    RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    const int64_t new_seqs = std::max({cap_seqs, seqs, int64_t{64}});
    const int64_t new_rows = std::max({cap_rows, rows, new_seqs, int64_t{256}});
    const int64_t c = spec.hidden_size;
    const size_t counter_bytes =
        new_seqs * std::max<int64_t>(1, max_gka_heads) * sizeof(cuda::SolveCounters);
    cuda::BufferRenewal renew;
    RETURN_IF_ERROR(renew.Device(&hidden, new_rows * c * sizeof(float)));
    RETURN_IF_ERROR(renew.Device(&normed, new_rows * c * 2));
    RETURN_IF_ERROR(renew.Device(&proj, new_rows * max_proj_width * sizeof(float)));
    RETURN_IF_ERROR(
        renew.Device(&qkv, new_rows * std::max<int64_t>(1, max_channels) * sizeof(float)));
    RETURN_IF_ERROR(renew.Device(&mixer_out, new_rows * max_mixer_out * 2));
    RETURN_IF_ERROR(renew.Device(&mlp, new_rows * 2 * max_intermediate * sizeof(float)));
    RETURN_IF_ERROR(renew.Device(&act, new_rows * max_intermediate * 2));
    RETURN_IF_ERROR(renew.Device(&counters, counter_bytes));
    if (options.rank) RETURN_IF_ERROR(renew.Device(&rank_partial, new_rows * c * sizeof(float)));
    RETURN_IF_ERROR(renew.Pinned(&host_counters, counter_bytes));
    graphs.Clear();
    renew.Commit();
    cap_rows = new_rows;
    cap_seqs = new_seqs;
  }
  if (table_ints > cap_table) {
    RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    const int64_t ints = std::max(table_ints, 2 * cap_table);
    cuda::BufferRenewal renew;
    RETURN_IF_ERROR(renew.Device(&table, ints * sizeof(int32_t)));
    RETURN_IF_ERROR(renew.Pinned(&host_table, ints * sizeof(int32_t)));
    graphs.Clear();
    renew.Commit();
    cap_table = ints;
  }
  if (partial_floats > cap_partials) {
    RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    const int64_t floats = std::max(partial_floats, 2 * cap_partials);
    graphs.Clear();
    cap_partials = 0;
    RETURN_IF_ERROR(partials.Allocate(floats * sizeof(float)));
    cap_partials = floats;
  }
  return absl::OkStatus();
}

absl::Status CudaHybridBackend::Impl::EnsureOutputCapacity(int64_t rows, Output output) {
  if (rows <= cap_logit_rows && (output != Output::kLogits || !host_logits.empty())) {
    return absl::OkStatus();
  }
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  graphs.Clear();  // they copy from and to these buffers
  const int64_t new_rows = std::max(rows, cap_logit_rows);
  const int64_t c = spec.hidden_size;
  // Logits can be gigabytes when every row's are wanted: the old buffers go first.
  logits = DeviceBuffer();
  host_logits = PinnedBuffer();
  local_logits = DeviceBuffer();
  RETURN_IF_ERROR(logits.Allocate(new_rows * vocab_stride * sizeof(float)));
  if (options.rank) RETURN_IF_ERROR(local_logits.Allocate(new_rows * head_stride * sizeof(float)));
  if (output == Output::kLogits) {
    RETURN_IF_ERROR(host_logits.Allocate(new_rows * spec.vocab_size * sizeof(float)));
  }
  const size_t params_bytes = new_rows * sizeof(cuda::SamplingRowParams);
  const size_t sampled_bytes = new_rows * sizeof(cuda::SampledToken);
  cuda::BufferRenewal renew;
  RETURN_IF_ERROR(renew.Device(&final_normed, new_rows * c * 2));
  RETURN_IF_ERROR(renew.Device(&argmax, new_rows * sizeof(int32_t)));
  RETURN_IF_ERROR(renew.Pinned(&host_argmax, new_rows * sizeof(int32_t)));
  RETURN_IF_ERROR(renew.Device(&sampling_params, params_bytes));
  RETURN_IF_ERROR(renew.Pinned(&host_sampling_params, params_bytes));
  RETURN_IF_ERROR(renew.Device(&sampled, sampled_bytes));
  RETURN_IF_ERROR(renew.Pinned(&host_sampled, sampled_bytes));
  renew.Commit();
  cap_logit_rows = new_rows;
  return absl::OkStatus();
}

absl::Status CudaHybridBackend::Impl::EnsurePenaltyCapacity(int64_t entries) {
  if (entries <= cap_penalties) return absl::OkStatus();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  const int64_t n = std::max(entries, 2 * cap_penalties);
  cuda::BufferRenewal renew;
  RETURN_IF_ERROR(renew.Device(&penalties, n * sizeof(cuda::PenaltyEntry)));
  RETURN_IF_ERROR(renew.Pinned(&host_penalties, n * sizeof(cuda::PenaltyEntry)));
  graphs.Clear();
  renew.Commit();
  cap_penalties = n;
  return absl::OkStatus();
}

CudaHybridBackend::Impl::AttentionSplits CudaHybridBackend::Impl::SplitsFor(
    const AttentionSpec& spec, const StepTable& t) const {
  const bool windowed = spec.window > 0;
  AttentionSplits splits;
  splits.rows = windowed ? t.rows : t.num_decode_rows;
  if (splits.rows == 0) return splits;
  const int64_t max_keys =
      windowed ? std::min<int64_t>(spec.window, t.max_keys) : t.max_decode_keys;
  const cuda::AttentionSplitShape shape{.rows = splits.rows,
                                        .max_keys = max_keys,
                                        .q_heads = static_cast<int32_t>(spec.q_heads),
                                        .kv_heads = static_cast<int32_t>(spec.kv_heads),
                                        .head_dim = static_cast<int32_t>(spec.head_dim),
                                        .paged = !windowed,
                                        .block_size = static_cast<int32_t>(kv.block_size),
                                        .fp8 = options.kv_cache_dtype == KvCacheDtype::kFp8E4m3};
  splits.max_splits = cuda::PickAttentionSplits(shape, sm_count);
  return splits;
}

absl::Status CudaHybridBackend::Impl::CheckBlockTables(std::span<const SlotChunk> chunks) const {
  if (kv.empty()) return absl::OkStatus();
  for (const SlotChunk& chunk : chunks) {
    const int64_t end = positions[chunk.slot] + static_cast<int64_t>(chunk.tokens.size());
    const int64_t needed = kv.BlocksFor(end);
    if (static_cast<int64_t>(chunk.kv_blocks.size()) < needed) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", chunk.slot, ": its KV block table has ", chunk.kv_blocks.size(),
                       " blocks; positions up to ", end, " need ", needed));
    }
  }
  return absl::OkStatus();
}

CudaHybridBackend::Impl::StepTable CudaHybridBackend::Impl::BuildTable(
    std::span<const SlotChunk> chunks, bool all_rows, int64_t padded_seqs, int64_t scored_rows) {
  StepTable t;
  t.all_rows = all_rows;
  t.real_seqs = static_cast<int64_t>(chunks.size());
  t.seqs = padded_seqs;
  int64_t blocks = 0;
  for (const SlotChunk& chunk : chunks) {
    const int64_t n = static_cast<int64_t>(chunk.tokens.size());
    t.rows += n;
    t.max_tokens = std::max(t.max_tokens, n);
    const int64_t end = positions[chunk.slot] + n;
    blocks += kv.BlocksFor(end);
    t.max_keys = std::max(t.max_keys, end);
    if (n == 1) {
      ++t.num_decode_rows;
      t.max_decode_keys = std::max(t.max_decode_keys, end);
    } else {
      t.num_prefill_tiles += (n + kPrefillTileRows - 1) / kPrefillTileRows;
    }
  }
  if (t.num_decode_rows == t.real_seqs) {
    // A decode step that may run from a graph: the splits must not change with every token.
    t.max_decode_keys = GraphKeysBucket(std::max<int64_t>(t.max_decode_keys, 1));
    t.max_keys = t.max_decode_keys;
  }
  const int64_t padding = padded_seqs - t.real_seqs;
  t.rows += padding;  // a row each at position 0 of the scratch slot and block
  t.num_decode_rows += padding;
  blocks += kv.empty() ? 0 : padding;
  t.out_rows = all_rows ? t.rows : t.seqs + scored_rows;
  int64_t at = 0;
  auto take = [&](int64_t n) {
    const int64_t offset = at;
    at += n;
    return offset;
  };
  t.ids = take(t.rows);
  t.row_sequence = take(t.rows);
  t.out_row = take(t.out_rows);
  t.row_begin = take(t.seqs);
  t.row_count = take(t.seqs);
  t.slot = take(t.seqs);
  t.start_position = take(t.seqs);
  t.tolerance = take(t.seqs);
  t.max_iterations = take(t.seqs);
  t.table_begin = take(t.seqs);
  t.prefill_tiles = take(t.num_prefill_tiles);
  t.decode_rows = take(t.num_decode_rows);
  t.block_tables = take(blocks);
  t.total = at;
  return t;
}

void CudaHybridBackend::Impl::FillTable(std::span<const SlotChunk> chunks,
                                        std::span<const TokenPick> picks, const StepTable& t) {
  int32_t* host = host_table.as<int32_t>();
  int64_t row = 0, block_at = 0, tile_at = 0, decode_at = 0;
  auto add_sequence = [&](int64_t i, int64_t slot, std::span<const int32_t> tokens, int64_t start,
                          SolverOptions solver, const int32_t* blocks, int64_t num_blocks) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    host[t.row_begin + i] = static_cast<int32_t>(row);
    host[t.row_count + i] = static_cast<int32_t>(n);
    host[t.slot + i] = static_cast<int32_t>(slot);
    host[t.start_position + i] = static_cast<int32_t>(start);
    std::memcpy(&host[t.tolerance + i], &solver.tolerance, sizeof(float));
    host[t.max_iterations + i] = solver.max_iterations;
    host[t.table_begin + i] = static_cast<int32_t>(block_at);
    std::copy_n(blocks, num_blocks, host + t.block_tables + block_at);
    block_at += num_blocks;
    if (n == 1) {
      host[t.decode_rows + decode_at++] = static_cast<int32_t>(row);
    } else {
      for (int64_t first = 0; first < n; first += kPrefillTileRows) {
        host[t.prefill_tiles + tile_at++] = static_cast<int32_t>(row + first);
      }
    }
    for (int32_t token : tokens) {
      host[t.ids + row] = token;
      host[t.row_sequence + row] = static_cast<int32_t>(i);
      if (t.all_rows) host[t.out_row + row] = static_cast<int32_t>(row);
      ++row;
    }
    if (!t.all_rows) host[t.out_row + i] = static_cast<int32_t>(row - 1);
  };
  for (int64_t i = 0; i < t.real_seqs; ++i) {
    const SlotChunk& chunk = chunks[i];
    const int64_t start = positions[chunk.slot];
    const int64_t end = start + static_cast<int64_t>(chunk.tokens.size());
    add_sequence(i, chunk.slot, chunk.tokens, start, chunk.solver, chunk.kv_blocks.data(),
                 kv.BlocksFor(end));
  }
  // Padding: a row each through the row kernels and attention (one key, on the scratch slot
  // and block), but no tokens for the convolution and the GKA recurrence, which skip such
  // sequences: their state traffic would cost as much as a real sequence's.
  static constexpr int32_t kPaddingToken = 0;
  for (int64_t i = t.real_seqs; i < t.seqs; ++i) {
    add_sequence(i, scratch_slot, {&kPaddingToken, 1}, 0, {0.0f, 1}, &scratch_block,
                 kv.empty() ? 0 : 1);
    host[t.row_count + i] = 0;
  }
  // The scored rows follow the sequences' last rows.
  if (!t.all_rows) FillScoredOutRows(picks, host + t.row_begin, host + t.out_row + t.seqs);
}

absl::Status CudaHybridBackend::Impl::PrepareSampling(std::span<const TokenPick> picks,
                                                      int64_t rows) {
  return UploadSamplingRows(
      picks, rows, spec.vocab_size, token_marks, host_sampling_params, sampling_params,
      [this](int64_t entries) { return EnsurePenaltyCapacity(entries); }, host_penalties, penalties,
      stream);
}

// The layers a replayed decode step's first graph holds: two layers of an 8B model at 16K take
// the device about 2 ms, longer than the host takes to launch the other graph's 350-odd nodes.
constexpr size_t kFirstGraphLayers = 2;

absl::Status CudaHybridBackend::Impl::RunStep(std::span<const SlotChunk> chunks, LogitsFor which,
                                              Output output, std::span<const TokenPick> picks,
                                              int64_t* out_rows) {
  // A step that failed half-way may have left work queued that reads the host table.
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  RETURN_IF_ERROR(CheckBlockTables(chunks));
  const bool all_rows = which == LogitsFor::kAllTokens;
  const int64_t seqs = static_cast<int64_t>(chunks.size());
  const int64_t scored_rows = all_rows ? 0 : ScoredRows(picks);
  const bool graphable = options.use_graphs && scored_rows == 0 &&
                         (!options.rank || options.rank->collective->capturable()) && !all_rows &&
                         seqs <= kMaxGraphBatch &&
                         std::all_of(chunks.begin(), chunks.end(),
                                     [](const SlotChunk& c) { return c.tokens.size() == 1; });
  const StepTable t =
      BuildTable(chunks, all_rows, graphable ? GraphBucket(seqs) : seqs, scored_rows);
  int64_t partial_floats = 0;  // the split-keys attention kernel's scratch
  for (const DeviceHybridLayer& layer : layers) {
    const auto* a = std::get_if<DeviceAttentionLayer>(&layer.mixer);
    if (a == nullptr) continue;
    const AttentionSplits splits = SplitsFor(a->spec, t);
    partial_floats =
        std::max(partial_floats, cuda::PagedAttentionScratchFloats(
                                     t.rows, a->spec.q_heads, a->spec.head_dim, splits.max_splits));
  }
  RETURN_IF_ERROR(EnsureStepCapacity(t.rows, t.seqs, t.total, partial_floats));
  RETURN_IF_ERROR(EnsureOutputCapacity(t.out_rows, output));
  FillTable(chunks, picks, t);
  const int32_t* host = host_table.as<int32_t>();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(table.as<void>(), host, t.total * sizeof(int32_t),
                                             cudaMemcpyHostToDevice, stream));
  if (output == Output::kSampled) RETURN_IF_ERROR(PrepareSampling(picks, t.out_rows));
  if (graphable) {
    const StepGraphKey key{
        .batch = t.seqs, .output = static_cast<int32_t>(output), .variant = t.max_decode_keys};
    // The first part, short, starts the device while the host launches the rest.
    const size_t split = std::min<size_t>(kFirstGraphLayers, layers.size());
    const std::function<absl::Status()> parts[] = {
        [&] { return EnqueueStepStart(t, split); },
        [&] { return EnqueueStepEnd(t, output, split); }};
    RETURN_IF_ERROR(graphs.Run(key, stream, parts));
  } else {
    RETURN_IF_ERROR(EnqueueStep(t, output));
  }
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));

  for (const SlotChunk& chunk : chunks) positions[chunk.slot] += chunk.tokens.size();
  if (max_gka_heads > 0) {
    const auto* c = host_counters.as<const cuda::SolveCounters>();
    for (int64_t i = 0; i < t.real_seqs; ++i) {
      if (chunks[i].stats != nullptr) {
        MergeSolveCounters(c + i * max_gka_heads, max_gka_heads, chunks[i].stats);
      }
    }
  }
  *out_rows = all_rows ? t.rows : t.real_seqs + scored_rows;  // scored: never padded
  return absl::OkStatus();
}

absl::Status CudaHybridBackend::Impl::EnqueueStep(const StepTable& t, Output output) {
  RETURN_IF_ERROR(EnqueueStepStart(t, layers.size()));
  return EnqueueStepEnd(t, output, layers.size());
}

absl::Status CudaHybridBackend::Impl::EnqueueStepStart(const StepTable& t, size_t split) {
  const int64_t c = spec.hidden_size;
  cudaStream_t s = stream;
  if (max_gka_heads > 0) {
    RIDGE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
        counters.as<void>(), 0, t.seqs * max_gka_heads * sizeof(cuda::SolveCounters), s));
  }
  const DeviceBuffer& embeddings = embedding.empty() ? head : embedding;
  RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchEmbedRows(DeviceTable(t.ids), embeddings.as<void>(),
                                                   t.rows, c, hidden.as<float>(), s,
                                                   local_vocab.first, local_vocab.count));
  if (options.rank) {
    RETURN_IF_ERROR(options.rank->collective->AllReduceSum(hidden.as<float>(), t.rows * c, s));
  }
  for (size_t i = 0; i < split; ++i) RETURN_IF_ERROR(EnqueueLayer(layers[i], t));
  return absl::OkStatus();
}

absl::Status CudaHybridBackend::Impl::EnqueueLayer(const DeviceHybridLayer& layer,
                                                   const StepTable& t) {
  const int64_t c = spec.hidden_size;
  const float eps = static_cast<float>(spec.rms_norm_eps);
  cudaStream_t s = stream;
  RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchRmsNormToBf16(hidden.as<float>(), nullptr,
                                                       layer.input_norm.as<float>(), t.rows, c, eps,
                                                       normed.as<void>(), s));
  if (const auto* g = std::get_if<DeviceGkaLayer>(&layer.mixer)) {
    RETURN_IF_ERROR(EnqueueGka(*g, t));
  } else {
    RETURN_IF_ERROR(EnqueueAttention(std::get<DeviceAttentionLayer>(layer.mixer), t));
  }
  RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchRmsNormToBf16(hidden.as<float>(), nullptr,
                                                       layer.post_norm.as<float>(), t.rows, c, eps,
                                                       normed.as<void>(), s));
  const int64_t inter = layer.intermediate;
  RETURN_IF_ERROR(WeightGemm(gemm(), normed.as<void>(), t.rows, c, layer.gate_up.as<void>(),
                             2 * inter, mlp.as<float>(), false));
  RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchSwiGlu(mlp.as<float>(), t.rows, inter, act.as<void>(), s));
  return AddProductToHidden(act.as<void>(), t.rows, inter, layer.down);
}

absl::Status CudaHybridBackend::Impl::EnqueueStepEnd(const StepTable& t, Output output,
                                                     size_t split) {
  const int64_t c = spec.hidden_size;
  const float eps = static_cast<float>(spec.rms_norm_eps);
  cudaStream_t s = stream;
  for (size_t i = split; i < layers.size(); ++i) RETURN_IF_ERROR(EnqueueLayer(layers[i], t));
  RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchRmsNormToBf16(
      hidden.as<float>(), t.all_rows ? nullptr : DeviceTable(t.out_row), final_norm.as<float>(),
      t.out_rows, c, eps, final_normed.as<void>(), s));
  if (options.rank) {
    RETURN_IF_ERROR(WeightGemm(gemm(), final_normed.as<void>(), t.out_rows, c, head.as<void>(),
                               head_stride, local_logits.as<float>(), false));
    RETURN_IF_ERROR(options.rank->collective->GatherColumns(
        local_logits.as<float>(), t.out_rows, head_stride, local_vocab.first, local_vocab.count,
        logits.as<float>(), vocab_stride, s));
  } else {
    RETURN_IF_ERROR(WeightGemm(gemm(), final_normed.as<void>(), t.out_rows, c, head.as<void>(),
                               vocab_stride, logits.as<float>(), false));
  }
  // Another rank's step ends here: rank 0 answers for the group.
  if (!answers()) output = Output::kNone;
  const int32_t vocab = static_cast<int32_t>(spec.vocab_size);
  switch (output) {
    case Output::kGreedy:
      RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchArgmaxRows(logits.as<float>(), t.out_rows, vocab,
                                                        vocab_stride, argmax.as<int32_t>(), s));
      RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_argmax.as<void>(), argmax.as<void>(),
                                                 t.out_rows * sizeof(int32_t),
                                                 cudaMemcpyDeviceToHost, s));
      break;
    case Output::kSampled: {
      cuda::TokenSamplingArgs sampling{};
      sampling.logits = logits.as<float>();
      sampling.row_stride = vocab_stride;
      sampling.vocab_size = vocab;
      sampling.num_rows = static_cast<int32_t>(t.out_rows);
      sampling.params = sampling_params.as<cuda::SamplingRowParams>();
      sampling.penalties = penalties.as<cuda::PenaltyEntry>();
      sampling.out = sampled.as<cuda::SampledToken>();
      RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchTokenSampling(sampling, s));
      RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_sampled.as<void>(), sampled.as<void>(),
                                                 t.out_rows * sizeof(cuda::SampledToken),
                                                 cudaMemcpyDeviceToHost, s));
      break;
    }
    case Output::kNone:
      break;
    case Output::kLogits:
      RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(host_logits.as<void>(), vocab * sizeof(float),
                                                   logits.as<void>(), vocab_stride * sizeof(float),
                                                   vocab * sizeof(float), t.out_rows,
                                                   cudaMemcpyDeviceToHost, s));
      break;
  }
  if (max_gka_heads > 0) {
    RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_counters.as<void>(), counters.as<void>(),
                                               t.seqs * max_gka_heads * sizeof(cuda::SolveCounters),
                                               cudaMemcpyDeviceToHost, s));
  }
  return absl::OkStatus();
}

absl::Status CudaHybridBackend::Impl::EnqueueGka(const DeviceGkaLayer& layer, const StepTable& t) {
  const GkaSpec& g = layer.spec;
  const int64_t c = spec.hidden_size, hx = g.expanded_heads(), d = g.head_dim;
  RETURN_IF_ERROR(WeightGemm(gemm(), normed.as<void>(), t.rows, c, layer.proj.as<void>(),
                             layer.proj_width, proj.as<float>(), false));
  cuda::CausalConvArgs conv{};
  conv.num_sequences = static_cast<int32_t>(t.seqs);
  conv.row_begin = DeviceTable(t.row_begin);
  conv.row_count = DeviceTable(t.row_count);
  conv.slot = DeviceTable(t.slot);
  conv.channels = static_cast<int32_t>(layer.channels);
  conv.width = static_cast<int32_t>(g.conv_size);
  conv.in = proj.as<float>();
  conv.in_stride = layer.proj_width;
  conv.weight = layer.conv.as<float>();
  conv.state_pool = state_pool.as<float>();
  conv.slot_floats = recurrent.floats_per_slot;
  conv.tail_offset = layer.state_offset + GkaSlotTailOffset(hx, d);
  conv.out = qkv.as<float>();
  conv.out_stride = layer.channels;
  RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchCausalConvSilu(conv, stream));

  cuda::GkaRecurrenceArgs r{};
  r.num_sequences = static_cast<int32_t>(t.seqs);
  r.q_heads = static_cast<int32_t>(g.q_heads);
  r.k_heads = static_cast<int32_t>(g.k_heads);
  r.v_heads = static_cast<int32_t>(g.v_heads);
  r.heads = static_cast<int32_t>(hx);
  r.head_dim = static_cast<int32_t>(d);
  r.max_tokens = static_cast<int32_t>(t.max_tokens);
  r.sm_count = sm_count;
  r.tensor_core_products = options.gka_prefill_tensor_cores;
  r.sequences = {DeviceTable(t.row_begin), DeviceTable(t.row_count), DeviceTable(t.slot),
                 reinterpret_cast<const float*>(DeviceTable(t.tolerance)),
                 DeviceTable(t.max_iterations)};
  r.qkv = qkv.as<float>();
  r.qkv_stride = layer.channels;
  r.proj = proj.as<float>();
  r.proj_stride = layer.proj_width;
  r.a_column = layer.a_column;
  r.b_column = layer.b_column;
  r.alpha_column = layer.alpha_column;
  r.g_column = layer.g_column;
  r.b_bias = layer.b_bias.as<float>();
  r.alpha_bias = layer.alpha_bias.as<float>();
  r.decay_rate = layer.decay_rate.as<float>();
  r.dt_bias = layer.dt_bias.as<float>();
  r.o_norm = layer.o_norm.as<float>();
  r.norm_eps = static_cast<float>(g.norm_eps);
  r.state_pool = state_pool.as<float>();
  r.slot_floats = recurrent.floats_per_slot;
  r.layer_offset = layer.state_offset;
  r.ridge_strength = static_cast<float>(g.ridge_strength);
  r.solve = g.num_iter > 0;
  r.out_bf16 = mixer_out.as<void>();
  r.out_stride = hx * d;
  r.counters = counters.as<cuda::SolveCounters>();
  r.counters_stride = static_cast<int32_t>(max_gka_heads);
  RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchGkaRecurrence(r, stream));
  return AddProductToHidden(mixer_out.as<void>(), t.rows, hx * d, layer.o_proj);
}

absl::Status CudaHybridBackend::Impl::EnqueueAttention(const DeviceAttentionLayer& layer,
                                                       const StepTable& t) {
  const AttentionSpec& a = layer.spec;
  const int64_t c = spec.hidden_size, d = a.head_dim;
  RETURN_IF_ERROR(WeightGemm(gemm(), normed.as<void>(), t.rows, c, layer.qkv.as<void>(),
                             layer.proj_width, proj.as<float>(), false));
  cuda::AttentionStep step{};
  step.rows = static_cast<int32_t>(t.rows);
  step.row_sequence = DeviceTable(t.row_sequence);
  step.row_begin = DeviceTable(t.row_begin);
  step.row_count = DeviceTable(t.row_count);
  step.start_position = DeviceTable(t.start_position);
  step.table_begin = DeviceTable(t.table_begin);
  step.block_tables = DeviceTable(t.block_tables);
  step.slot = DeviceTable(t.slot);
  const bool windowed = a.window > 0;
  cuda::PagedKv paged{};
  cuda::WindowKv ring{};
  if (windowed) {
    ring = {state_pool.as<float>(), recurrent.floats_per_slot, layer.memory_offset,
            static_cast<int32_t>(a.window)};
  } else {
    paged = {kv_cache.as<void>(), kv.floats_per_block(), layer.memory_offset,
             static_cast<int32_t>(kv.block_size), options.kv_cache_dtype == KvCacheDtype::kFp8E4m3};
  }

  cuda::QkRopeArgs rope{};
  rope.step = step;
  rope.q_heads = static_cast<int32_t>(a.q_heads);
  rope.kv_heads = static_cast<int32_t>(a.kv_heads);
  rope.head_dim = static_cast<int32_t>(d);
  rope.proj = proj.as<float>();
  rope.proj_stride = layer.proj_width;
  rope.q_norm = layer.q_norm.as<float>();
  rope.k_norm = layer.k_norm.as<float>();
  rope.norm_eps = static_cast<float>(a.qk_norm_eps);
  rope.inv_freq = layer.inv_freq.as<double>();
  rope.attention_factor = static_cast<float>(a.rope.attention_factor);
  rope.kv = paged;
  RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchQkRope(rope, stream));

  cuda::PagedAttentionArgs attention{};
  attention.step = step;
  attention.q_heads = rope.q_heads;
  attention.kv_heads = rope.kv_heads;
  attention.head_dim = rope.head_dim;
  attention.proj = proj.as<float>();
  attention.proj_stride = layer.proj_width;
  attention.scale = 1.0f / std::sqrt(static_cast<float>(d));
  attention.paged = paged;
  attention.ring = ring;
  attention.partials = partials.as<float>();
  attention.out_bf16 = mixer_out.as<void>();
  attention.out_stride = a.q_heads * d;
  const AttentionSplits splits = SplitsFor(a, t);
  attention.max_splits = splits.max_splits;
  if (windowed) {  // every row through the split-keys kernel
    RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchPagedAttention(attention, stream));
  } else {
    RIDGE_CUDA_RETURN_IF_ERROR(
        cuda::LaunchPagedPrefillAttention(attention, DeviceTable(t.prefill_tiles),
                                          static_cast<int32_t>(t.num_prefill_tiles), stream));
    if (t.num_decode_rows > 0) {
      attention.row_list = DeviceTable(t.decode_rows);
      attention.row_list_size = static_cast<int32_t>(t.num_decode_rows);
      RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchPagedAttention(attention, stream));
    }
  }
  if (windowed) {
    cuda::RingWriteArgs write{};
    write.step = step;
    write.kv_width = static_cast<int32_t>(a.kv_heads * d);
    write.proj = proj.as<float>();
    write.proj_stride = layer.proj_width;
    write.k_column = static_cast<int32_t>(a.q_heads * d);
    write.ring = ring;
    RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchRingWrite(write, stream));
  }
  return AddProductToHidden(mixer_out.as<void>(), t.rows, a.q_heads * d, layer.o_proj);
}

absl::Status CudaHybridBackend::Impl::AddProductToHidden(const void* x, int64_t rows, int64_t in,
                                                         const DeviceBuffer& w) {
  const int64_t c = spec.hidden_size;
  if (!options.rank)
    return WeightGemm(gemm(), x, rows, in, w.as<void>(), c, hidden.as<float>(), true);
  RETURN_IF_ERROR(
      WeightGemm(gemm(), x, rows, in, w.as<void>(), c, rank_partial.as<float>(), false));
  RETURN_IF_ERROR(
      options.rank->collective->AllReduceSum(rank_partial.as<float>(), rows * c, stream));
  const float one = 1.0f;
  RIDGE_CUBLAS_RETURN_IF_ERROR(cublasSaxpy(cublas, static_cast<int>(rows * c), &one,
                                           rank_partial.as<float>(), 1, hidden.as<float>(), 1));
  return absl::OkStatus();
}

}  // namespace ridge
