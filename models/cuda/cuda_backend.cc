#include "models/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "models/cuda/cuda_backend_impl.h"
#include "models/slot_packing.h"

namespace ridge {
namespace {

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

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    const MesaNetConfig& config, const MesaNetWeights& weights, const CudaBackendOptions& options) {
  RETURN_IF_ERROR(CheckDeviceExists(options.device));
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
  ASSIGN_OR_RETURN(const cudaDeviceProp prop, HopperDeviceProperties(options.device));
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
  const SlotShape slot_shape = SlotShape::Of(config);
  impl->layer_floats = slot_shape.packed_layer_floats();
  impl->slot_floats = slot_shape.packed_slot_floats();

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

absl::Status CudaBackend::Health() const {
  return DeviceHealth(impl_->options.device, impl_->stream);
}
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

// The pool's own layout (Hs packed, kernels/mesa_slot_layout.h), not MesaState's.
std::string CudaBackend::state_format() const { return "cuda-mesa/packed-fp32"; }

absl::Status CudaBackend::ExportSlot(int64_t slot, std::string* bytes) {
  RETURN_IF_ERROR(CheckSlot(slot));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  bytes->resize(impl_->slot_floats * sizeof(float));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpy(bytes->data(),
                                        impl_->state_pool.as<float>() + slot * impl_->slot_floats,
                                        bytes->size(), cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

absl::Status CudaBackend::ImportSlot(int64_t slot, std::string_view bytes, int64_t position) {
  RETURN_IF_ERROR(CheckSlot(slot));
  RETURN_IF_ERROR(CheckImport("a state", bytes, impl_->slot_floats * sizeof(float)));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.device));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpy(impl_->state_pool.as<float>() + slot * impl_->slot_floats,
                                        bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  impl_->slot_tokens[slot] = position;
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
