#include "models/cuda/hybrid_backend.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/half.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "engine/memory_plan.h"
#include "kernels/cuda/causal_conv.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gka_recurrence.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/gka_slot_layout.h"
#include "models/cuda/cuda_backend.h"  // kCublasWorkspaceBytes
#include "models/cuda/hybrid_backend_impl.h"
#include "models/rope.h"

namespace ridge {
namespace {

// Memory the planner leaves free beyond the pools for the step buffers (they grow with the
// step's rows: a 2048-token prefill of an 8B model takes a few hundred MB) and cuBLAS.
constexpr int64_t kStepMemoryReserve = int64_t{3} << 30;
// Rows of a weight matrix converted to bf16 on the host per copy to the device.
constexpr int64_t kUploadRows = 1024;

// The parts' rows, one after another, into a new bf16 device matrix of `padded_rows` rows (the
// rest zero); each part is converted from its checkpoint dtype.
absl::StatusOr<DeviceBuffer> UploadRows(std::initializer_list<const WeightMatrix*> parts,
                                        int64_t padded_rows) {
  const int64_t cols = (*parts.begin())->cols;
  DeviceBuffer out;
  RETURN_IF_ERROR(out.Allocate(static_cast<size_t>(padded_rows * cols) * 2));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemset(out.as<void>(), 0, out.bytes()));
  std::vector<uint16_t> staging;
  std::vector<float> row(cols);
  int64_t at = 0;
  for (const WeightMatrix* w : parts) {
    if (w->cols != cols) return absl::InternalError("fused matrices differ in columns");
    for (int64_t first = 0; first < w->rows; first += kUploadRows) {
      const int64_t n = std::min(kUploadRows, w->rows - first);
      staging.resize(n * cols);
      if (w->dtype == DType::kBF16) {
        std::memcpy(staging.data(), w->data + first * cols * 2, n * cols * 2);
      } else {
        for (int64_t r = 0; r < n; ++r) {
          WeightRowToFloat(*w, first + r, row.data());
          for (int64_t c = 0; c < cols; ++c) staging[r * cols + c] = FloatToBf16(row[c]);
        }
      }
      RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.as<uint16_t>() + (at + first) * cols,
                                            staging.data(), n * cols * 2, cudaMemcpyHostToDevice));
    }
    at += w->rows;
  }
  if (at > padded_rows) return absl::InternalError("fused matrix larger than its padding");
  return out;
}

absl::StatusOr<DeviceBuffer> UploadDoubles(const std::vector<double>& values) {
  DeviceBuffer out;
  RETURN_IF_ERROR(out.Allocate(values.size() * sizeof(double)));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.as<void>(), values.data(),
                                        values.size() * sizeof(double), cudaMemcpyHostToDevice));
  return out;
}

// What the kernels do not take, named; OK when every layer runs.
absl::Status CheckSupported(const ModelSpec& spec) {
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    const MixerSpec& mixer = spec.layers[l].mixer;
    if (IsMesa(mixer)) {
      return absl::UnimplementedError(
          absl::StrCat("layer ", l,
                       " is a MesaNet layer: the hybrid CUDA backend runs GKA and "
                       "attention layers (MesaNet models have their own backend)"));
    }
    if (const auto* g = std::get_if<GkaSpec>(&mixer)) {
      if (!cuda::IsGkaHeadDim(static_cast<int32_t>(g->head_dim)) || g->conv_size < 1 ||
          g->conv_size > cuda::kMaxConvWidth) {
        return absl::UnimplementedError(absl::StrCat(
            "layer ", l, ": the CUDA GKA kernels take head_dim 64 or 128 and conv_size 1 to ",
            cuda::kMaxConvWidth, "; this layer has head_dim ", g->head_dim, " and conv_size ",
            g->conv_size));
      }
    } else {
      const auto& a = std::get<AttentionSpec>(mixer);
      if (!cuda::PagedAttentionSupports(static_cast<int32_t>(a.q_heads),
                                        static_cast<int32_t>(a.kv_heads),
                                        static_cast<int32_t>(a.head_dim))) {
        return absl::UnimplementedError(
            absl::StrCat("layer ", l,
                         ": the CUDA attention kernels take head_dim 64 or 128 and 1, 2, 4 or 8 "
                         "query heads per kv head; this layer has head_dim ",
                         a.head_dim, ", ", a.q_heads, " query and ", a.kv_heads, " kv heads"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceGkaLayer> UploadGka(const GkaSpec& g, const GkaLayerWeights& w,
                                         int64_t state_offset) {
  DeviceGkaLayer d;
  d.spec = g;
  d.state_offset = state_offset;
  const int64_t hx = g.expanded_heads(), dim = g.head_dim;
  d.channels = (g.q_heads + g.k_heads + g.v_heads) * dim;
  d.a_column = static_cast<int32_t>(d.channels);
  d.b_column = static_cast<int32_t>(d.a_column + hx);
  d.alpha_column = static_cast<int32_t>(d.b_column + hx);
  d.g_column = static_cast<int32_t>(d.alpha_column + hx);
  d.proj_width = PadWidth(d.g_column + hx * dim);
  ASSIGN_OR_RETURN(d.proj, UploadRows({&w.q_proj, &w.k_proj, &w.v_proj, &w.a_proj, &w.b_proj,
                                       &w.alpha_proj, &w.g_proj},
                                      d.proj_width));
  ASSIGN_OR_RETURN(d.o_proj, UploadRows({&w.o_proj}, w.o_proj.rows));
  ASSIGN_OR_RETURN(d.conv, cuda::UploadAsF32(w.conv));
  ASSIGN_OR_RETURN(d.b_bias, cuda::UploadAsF32(w.b_bias));
  ASSIGN_OR_RETURN(d.alpha_bias, cuda::UploadAsF32(w.alpha_bias));
  ASSIGN_OR_RETURN(d.decay_rate, cuda::UploadAsF32(w.decay_rate));
  ASSIGN_OR_RETURN(d.dt_bias, cuda::UploadAsF32(w.dt_bias));
  ASSIGN_OR_RETURN(d.o_norm, cuda::UploadAsF32(w.o_norm));
  return d;
}

absl::StatusOr<DeviceAttentionLayer> UploadAttention(const AttentionSpec& a,
                                                     const AttentionLayerWeights& w,
                                                     int64_t memory_offset) {
  DeviceAttentionLayer d;
  d.spec = a;
  d.memory_offset = memory_offset;
  d.proj_width = PadWidth((a.q_heads + 2 * a.kv_heads) * a.head_dim);
  ASSIGN_OR_RETURN(d.qkv, UploadRows({&w.q_proj, &w.k_proj, &w.v_proj}, d.proj_width));
  ASSIGN_OR_RETURN(d.o_proj, UploadRows({&w.o_proj}, w.o_proj.rows));
  ASSIGN_OR_RETURN(d.q_norm, cuda::UploadAsF32(w.q_norm));
  ASSIGN_OR_RETURN(d.k_norm, cuda::UploadAsF32(w.k_norm));
  ASSIGN_OR_RETURN(d.inv_freq, UploadDoubles(RopeInverseFrequencies(a.rope, a.head_dim)));
  return d;
}

int64_t BytesOf(const DeviceHybridLayer& layer) {
  int64_t bytes = layer.input_norm.bytes() + layer.post_norm.bytes() + layer.gate_up.bytes() +
                  layer.down.bytes();
  if (const auto* g = std::get_if<DeviceGkaLayer>(&layer.mixer)) {
    for (const DeviceBuffer* b : {&g->proj, &g->o_proj, &g->conv, &g->b_bias, &g->alpha_bias,
                                  &g->decay_rate, &g->dt_bias, &g->o_norm}) {
      bytes += b->bytes();
    }
  } else {
    const auto& a = std::get<DeviceAttentionLayer>(layer.mixer);
    for (const DeviceBuffer* b : {&a.qkv, &a.o_proj, &a.q_norm, &a.k_norm, &a.inv_freq}) {
      bytes += b->bytes();
    }
  }
  return bytes;
}

}  // namespace

KvLayout PlanDeviceKvLayout(const ModelSpec& spec, int64_t block_size, KvCacheDtype dtype) {
  KvLayout layout = PlanKvLayout(spec, block_size);
  if (dtype == KvCacheDtype::kBf16) {
    layout.element_bytes = 2;
    return layout;
  }
  layout.element_bytes = 1;
  layout.floats_per_token = 0;
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    if (layout.layer_offset[l] < 0) continue;
    const auto& a = std::get<AttentionSpec>(spec.layers[l].mixer);
    layout.layer_offset[l] = layout.floats_per_token * block_size;
    layout.floats_per_token += a.kv_heads * cuda::Fp8KvBytesPerHeadToken(a.head_dim);
  }
  return layout;
}

RecurrentLayout PlanDeviceRecurrentLayout(const ModelSpec& spec) {
  RecurrentLayout layout;
  for (const LayerSpec& layer : spec.layers) {
    int64_t floats = RecurrentStateFloats(layer.mixer);
    if (const auto* g = std::get_if<GkaSpec>(&layer.mixer)) {
      const int64_t hx = g->expanded_heads(), d = g->head_dim;
      floats = GkaSlotLayerFloats(hx, d, floats - 2 * hx * d * d);  // the tail as the CPU's
    }
    layout.layer_offset.push_back(floats > 0 ? layout.floats_per_slot : -1);
    layout.floats_per_slot += floats;
  }
  return layout;
}

CudaHybridBackend::CudaHybridBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaHybridBackend::~CudaHybridBackend() = default;

absl::StatusOr<std::unique_ptr<CudaHybridBackend>> CudaHybridBackend::Create(
    const ModelSpec& spec, const HybridWeights& weights, const CudaHybridOptions& options) {
  RETURN_IF_ERROR(CheckDeviceExists(options.device));
  RETURN_IF_ERROR(CheckSupported(spec));
  if (options.num_slots < 1) return absl::InvalidArgumentError("the CUDA backend needs >= 1 slot");
  if (options.kv_block_size < 1 || options.kv_block_size > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV block size ", options.kv_block_size, " must be 1 to 1024"));
  }
  if (options.kv_cache_dtype == KvCacheDtype::kFp8E4m3 && options.kv_block_size % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an fp8 KV cache needs blocks of a multiple of 16 tokens, not ", options.kv_block_size));
  }
  if (!(options.gpu_memory_utilization > 0.0 && options.gpu_memory_utilization <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPU memory utilization ", options.gpu_memory_utilization, " must be in (0, 1]"));
  }
  if (weights.layers.size() != spec.layers.size()) {
    return absl::InvalidArgumentError("the weights do not match the model's layers");
  }
  const IndexRange local_vocab =
      options.rank ? options.rank->vocab : IndexRange{0, spec.vocab_size};
  if (options.rank && (options.rank->collective == nullptr || local_vocab.first < 0 ||
                       local_vocab.count < 1 || local_vocab.end() > spec.vocab_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a tensor-parallel rank needs a collective and a slice of the vocabulary of ",
                     spec.vocab_size, "; got [", local_vocab.first, ", ", local_vocab.end(), ")"));
  }
  if (weights.head.rows != local_vocab.count || weights.embedding.rows != local_vocab.count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the embedding and output layer have ", weights.embedding.rows, " and ", weights.head.rows,
        " rows; this backend's vocabulary has ", local_vocab.count));
  }
  ASSIGN_OR_RETURN(const cudaDeviceProp prop, HopperDeviceProperties(options.device));
  const size_t sampling_smem = cuda::TokenSamplingSharedBytes(static_cast<int>(spec.vocab_size));
  if (prop.sharedMemPerBlockOptin < sampling_smem) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", options.device, " (", prop.name, ") offers ", prop.sharedMemPerBlockOptin,
        " bytes of shared memory per block; the sampling kernel needs ", sampling_smem));
  }
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));

  auto impl = std::make_unique<Impl>();
  impl->spec = spec;
  impl->options = options;
  impl->sm_count = prop.multiProcessorCount;
  impl->recurrent = PlanDeviceRecurrentLayout(spec);
  impl->kv = PlanDeviceKvLayout(spec, options.kv_block_size, options.kv_cache_dtype);
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  RIDGE_CUBLAS_RETURN_IF_ERROR(cublasCreate(&impl->cublas));
  RIDGE_CUBLAS_RETURN_IF_ERROR(cublasSetStream(impl->cublas, impl->stream));
  RETURN_IF_ERROR(impl->cublas_workspace.Allocate(kCublasWorkspaceBytes));
  RIDGE_CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(impl->cublas, impl->cublas_workspace.as<void>(),
                                                  impl->cublas_workspace.bytes()));

  // Weights: the head padded to a multiple of 16 rows (a tied one serves as the embedding too).
  const int64_t c = spec.hidden_size;
  impl->vocab_stride = PadWidth(spec.vocab_size);
  impl->local_vocab = local_vocab;
  impl->head_stride = PadWidth(local_vocab.count);
  const bool tied = weights.head.data == weights.embedding.data;
  ASSIGN_OR_RETURN(impl->head, UploadRows({&weights.head}, impl->head_stride));
  if (!tied) {
    ASSIGN_OR_RETURN(impl->embedding, UploadRows({&weights.embedding}, local_vocab.count));
  }
  ASSIGN_OR_RETURN(impl->final_norm, cuda::UploadAsF32(weights.final_norm));
  int64_t bytes = impl->head.bytes() + impl->embedding.bytes() + impl->final_norm.bytes();
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    const HybridLayerWeights& w = weights.layers[l];
    DeviceHybridLayer layer;
    ASSIGN_OR_RETURN(layer.input_norm, cuda::UploadAsF32(w.input_norm));
    ASSIGN_OR_RETURN(layer.post_norm, cuda::UploadAsF32(w.post_norm));
    layer.intermediate = spec.layers[l].intermediate_size;
    ASSIGN_OR_RETURN(layer.gate_up, UploadRows({&w.gate, &w.up}, 2 * layer.intermediate));
    ASSIGN_OR_RETURN(layer.down, UploadRows({&w.down}, c));
    if (const auto* g = std::get_if<GkaSpec>(&spec.layers[l].mixer)) {
      ASSIGN_OR_RETURN(layer.mixer, UploadGka(*g, std::get<GkaLayerWeights>(w.mixer),
                                              impl->recurrent.layer_offset[l]));
      const auto& d = std::get<DeviceGkaLayer>(layer.mixer);
      impl->max_proj_width = std::max(impl->max_proj_width, d.proj_width);
      impl->max_channels = std::max(impl->max_channels, d.channels);
      impl->max_mixer_out = std::max(impl->max_mixer_out, g->expanded_heads() * g->head_dim);
      impl->max_gka_heads = std::max(impl->max_gka_heads, g->expanded_heads());
    } else {
      const auto& a = std::get<AttentionSpec>(spec.layers[l].mixer);
      const int64_t offset =
          a.window > 0 ? impl->recurrent.layer_offset[l] : impl->kv.layer_offset[l];
      ASSIGN_OR_RETURN(layer.mixer,
                       UploadAttention(a, std::get<AttentionLayerWeights>(w.mixer), offset));
      const auto& d = std::get<DeviceAttentionLayer>(layer.mixer);
      impl->max_proj_width = std::max(impl->max_proj_width, d.proj_width);
      impl->max_mixer_out = std::max(impl->max_mixer_out, a.q_heads * a.head_dim);
    }
    impl->max_intermediate = std::max(impl->max_intermediate, layer.intermediate);
    bytes += BytesOf(layer);
    impl->layers.push_back(std::move(layer));
  }
  impl->weight_bytes = bytes;

  // The pools: what the utilization leaves after what is in use now (the weights, the CUDA
  // context) and a reserve for the step buffers.
  size_t free_bytes = 0, total_bytes = 0;
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t used = static_cast<int64_t>(total_bytes - free_bytes);
  const int64_t state_bytes = impl->recurrent.bytes_per_slot();
  const int64_t block_bytes = impl->kv.bytes_per_block();
  // The graphs' padding slot and block (Impl::scratch_slot) come out of the budget first.
  const int64_t budget =
      static_cast<int64_t>(options.gpu_memory_utilization * static_cast<double>(total_bytes)) -
      used - kStepMemoryReserve - state_bytes - block_bytes;
  if (budget < state_bytes + block_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "GPU memory: ", budget, " bytes are left for the state and KV pools at utilization ",
        options.gpu_memory_utilization, " after ", impl->weight_bytes,
        " bytes of weights and a step reserve of ", kStepMemoryReserve, "; one sequence needs ",
        state_bytes, " bytes of state and ", block_bytes, " of KV block"));
  }
  const int64_t context = spec.max_position_embeddings > 0 ? spec.max_position_embeddings
                                                           : std::numeric_limits<int32_t>::max();
  const MemoryPlan plan = PlanMemory({.budget_bytes = budget,
                                      .state_bytes_per_slot = state_bytes,
                                      .kv_bytes_per_block = block_bytes,
                                      .kv_block_size = options.kv_block_size,
                                      .slots = options.num_slots,
                                      .kv_blocks = options.num_kv_blocks,
                                      .default_context = options.num_kv_blocks > 0 ? 0 : context});
  for (const std::string& warning : plan.warnings) {
    Log(LogLevel::kWarning, warning, " (GPU memory)");
  }
  RETURN_IF_ERROR(impl->state_pool.Allocate(static_cast<size_t>((plan.slots + 1) * state_bytes)));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemset(impl->state_pool.as<void>(), 0, impl->state_pool.bytes()));
  impl->positions.assign(plan.slots, 0);
  impl->scratch_slot = static_cast<int32_t>(plan.slots);
  if (!impl->kv.empty()) {
    impl->num_kv_blocks = plan.kv_blocks;
    impl->scratch_block = static_cast<int32_t>(plan.kv_blocks);
    RETURN_IF_ERROR(
        impl->kv_cache.Allocate(static_cast<size_t>((plan.kv_blocks + 1) * block_bytes)));
    // Zeros: a block is always written before it is read, but never holds NaN bit patterns.
    RIDGE_CUDA_RETURN_IF_ERROR(cudaMemset(impl->kv_cache.as<void>(), 0, impl->kv_cache.bytes()));
  }
  return std::unique_ptr<CudaHybridBackend>(new CudaHybridBackend(std::move(impl)));
}

const ModelSpec& CudaHybridBackend::spec() const { return impl_->spec; }
int64_t CudaHybridBackend::num_slots() const {
  return static_cast<int64_t>(impl_->positions.size());
}
int64_t CudaHybridBackend::state_bytes_per_slot() const {
  return impl_->recurrent.bytes_per_slot();
}
const KvLayout& CudaHybridBackend::kv_layout() const { return impl_->kv; }
int64_t CudaHybridBackend::num_kv_blocks() const { return impl_->num_kv_blocks; }
int64_t CudaHybridBackend::weight_bytes() const { return impl_->weight_bytes; }
int64_t CudaHybridBackend::graph_replays() const { return impl_->graphs.replays(); }

int64_t CudaHybridBackend::SlotPosition(int64_t slot) const { return impl_->positions.at(slot); }

absl::Status CudaHybridBackend::Health() const {
  return DeviceHealth(impl_->options.device, impl_->stream);
}

absl::Status CudaHybridBackend::ResetSlot(int64_t slot) {
  RETURN_IF_ERROR(CheckSlot(slot));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  const int64_t bytes = impl_->recurrent.bytes_per_slot();
  RIDGE_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(impl_->state_pool.as<char>() + slot * bytes, 0, bytes, impl_->stream));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  impl_->positions[slot] = 0;
  return absl::OkStatus();
}

absl::Status CudaHybridBackend::CopySlot(int64_t from, int64_t to) {
  RETURN_IF_ERROR(CheckSlot(from));
  RETURN_IF_ERROR(CheckSlot(to));
  if (from == to) return absl::OkStatus();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  const int64_t bytes = impl_->recurrent.bytes_per_slot();
  char* pool = impl_->state_pool.as<char>();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pool + to * bytes, pool + from * bytes, bytes,
                                             cudaMemcpyDeviceToDevice, impl_->stream));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  impl_->positions[to] = impl_->positions[from];
  return absl::OkStatus();
}

absl::Status CudaHybridBackend::CopyKvBlock(int32_t from, int32_t to) {
  if (impl_->num_kv_blocks == 0) return ModelBackend::CopyKvBlock(from, to);
  RETURN_IF_ERROR(CheckKvBlock(from));
  RETURN_IF_ERROR(CheckKvBlock(to));
  if (from == to) return absl::OkStatus();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  const int64_t bytes = impl_->kv.bytes_per_block();
  char* cache = impl_->kv_cache.as<char>();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(cache + to * bytes, cache + from * bytes, bytes,
                                             cudaMemcpyDeviceToDevice, impl_->stream));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  return absl::OkStatus();
}

// The pool's own layout (PlanDeviceRecurrentLayout: GKA Hs packed), so sessions saved before
// Hs was packed (formats without "packed-") are refused by name, not misread.
std::string CudaHybridBackend::state_format() const {
  return impl_->kv.empty() ? "cuda-hybrid/packed-fp32"
         : impl_->options.kv_cache_dtype == KvCacheDtype::kFp8E4m3
             ? "cuda-hybrid/packed-fp32+kv-fp8e4m3"
             : "cuda-hybrid/packed-fp32+kv-bf16";
}

absl::Status CudaHybridBackend::ExportSlot(int64_t slot, std::string* bytes) {
  RETURN_IF_ERROR(CheckSlot(slot));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  const int64_t size = impl_->recurrent.bytes_per_slot();
  bytes->resize(size);
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpy(bytes->data(), impl_->state_pool.as<char>() + slot * size,
                                        size, cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status CudaHybridBackend::ImportSlot(int64_t slot, std::string_view bytes, int64_t position) {
  RETURN_IF_ERROR(CheckSlot(slot));
  const int64_t size = impl_->recurrent.bytes_per_slot();
  RETURN_IF_ERROR(CheckImport("a state", bytes, size));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpy(impl_->state_pool.as<char>() + slot * size, bytes.data(),
                                        size, cudaMemcpyHostToDevice));
  impl_->positions[slot] = position;
  return absl::OkStatus();
}

absl::Status CudaHybridBackend::ExportKvBlock(int32_t block, std::string* bytes) {
  RETURN_IF_ERROR(CheckKvBlock(block));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  const int64_t size = impl_->kv.bytes_per_block();
  bytes->resize(size);
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpy(bytes->data(), impl_->kv_cache.as<char>() + block * size,
                                        size, cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status CudaHybridBackend::ImportKvBlock(int32_t block, std::string_view bytes) {
  RETURN_IF_ERROR(CheckKvBlock(block));
  const int64_t size = impl_->kv.bytes_per_block();
  RETURN_IF_ERROR(CheckImport("a KV block", bytes, size));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpy(impl_->kv_cache.as<char>() + block * size, bytes.data(),
                                        size, cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

absl::Status CudaHybridBackend::ReadSlot(int64_t slot, std::vector<float>* state) const {
  RETURN_IF_ERROR(CheckSlot(slot));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  const int64_t floats = impl_->recurrent.floats_per_slot;
  state->resize(floats);
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpy(state->data(),
                                        impl_->state_pool.as<float>() + slot * floats,
                                        floats * sizeof(float), cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status CudaHybridBackend::Forward(std::span<const SlotChunk> chunks, LogitsFor which,
                                        std::vector<float>* logits) {
  RETURN_IF_ERROR(ValidateChunks(chunks));
  logits->clear();
  if (chunks.empty()) return absl::OkStatus();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  int64_t out_rows = 0;
  RETURN_IF_ERROR(impl_->RunStep(chunks, which, Impl::Output::kLogits, {}, &out_rows));
  if (!impl_->answers()) return absl::OkStatus();
  const float* host = impl_->host_logits.as<const float>();
  logits->assign(host, host + out_rows * impl_->spec.vocab_size);
  return absl::OkStatus();
}

absl::Status CudaHybridBackend::ForwardGreedy(std::span<const SlotChunk> chunks,
                                              std::vector<int32_t>* next_tokens) {
  RETURN_IF_ERROR(ValidateChunks(chunks));
  next_tokens->clear();
  if (chunks.empty()) return absl::OkStatus();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  int64_t out_rows = 0;
  RETURN_IF_ERROR(
      impl_->RunStep(chunks, LogitsFor::kLastToken, Impl::Output::kGreedy, {}, &out_rows));
  if (!impl_->answers()) return absl::OkStatus();
  const int32_t* best = impl_->host_argmax.as<int32_t>();
  next_tokens->assign(best, best + out_rows);
  return absl::OkStatus();
}

absl::Status CudaHybridBackend::ForwardSample(std::span<const SlotChunk> chunks,
                                              std::span<const TokenPick> picks,
                                              std::vector<PickedToken>* picked) {
  RETURN_IF_ERROR(ValidateChunks(chunks));
  RETURN_IF_ERROR(ValidatePicks(chunks, picks));
  if (!impl_->answers()) {  // the step's part of another rank; rank 0 picks for the group
    picked->clear();
    if (ScoredRows(picks) == 0) {
      std::vector<int32_t> none;
      return ForwardGreedy(chunks, &none);
    }
    // Scored rows add output rows, which every rank's head product and gather must have.
    RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
    int64_t out_rows = 0;
    return impl_->RunStep(chunks, LogitsFor::kLastToken, Impl::Output::kSampled, picks, &out_rows);
  }
  picked->assign(chunks.size(), PickedToken{});
  if (chunks.empty()) return absl::OkStatus();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  // The device's sampler knows no logit bias and no JSON mask: those rows are picked on the
  // host from their logits, the others on the device.
  const SplitPicks split = SplitHostPicks(picks);
  int64_t out_rows = 0;
  RETURN_IF_ERROR(impl_->RunStep(chunks, LogitsFor::kLastToken, Impl::Output::kSampled,
                                 split.device, &out_rows));
  CopyPicks(split.device, impl_->host_sampled.as<const cuda::SampledToken>(), out_rows, picked);
  if (split.host_rows.empty()) return absl::OkStatus();
  return PickRowsOnHost(picks, split.host_rows, impl_->logits.as<const float>(),
                        impl_->vocab_stride, impl_->spec.vocab_size, impl_->host_pick_logits,
                        impl_->stream, picked);
}

}  // namespace ridge
