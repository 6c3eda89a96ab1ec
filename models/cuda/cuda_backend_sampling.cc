// Picking tokens on the device: each row's sampling parameters and penalty entries for the
// sampling kernel, and the greedy and sampled forward calls that return only the picks.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "models/cuda/cuda_backend_impl.h"

namespace ridge {

absl::Status CudaBackend::Impl::PrepareSampling(std::span<const TokenPick> picks, int64_t rows) {
  // The picks were checked by ValidatePicks.
  const int32_t vocab = static_cast<int32_t>(config.vocab_size);
  if (token_marks.empty()) token_marks.assign(vocab, 0);
  auto* params = host_sampling_params.as<cuda::SamplingRowParams>();
  std::vector<cuda::PenaltyEntry> entries;
  BuildSamplingRows(picks, rows, token_marks, params, &entries);
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
  CopyPicks(picks, impl_->host_sampled.as<const cuda::SampledToken>(), picked);
  return absl::OkStatus();
}

}  // namespace ridge
