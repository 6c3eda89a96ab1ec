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
  return UploadSamplingRows(
      picks, rows, config.vocab_size, token_marks, host_sampling_params, sampling_params,
      [this](int64_t entries) { return EnsurePenaltyCapacity(entries); }, host_penalties, penalties,
      stream);
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
  // The device's sampler knows no logit bias and no JSON mask: those rows are picked on the
  // host from their logits, the others on the device.
  const SplitPicks split = SplitHostPicks(picks);
  int64_t out_rows = 0;
  RETURN_IF_ERROR(
      impl_->RunStep(chunks, LogitsFor::kLastToken, StepOutput::kSampled, split.device, &out_rows));
  CopyPicks(split.device, impl_->host_sampled.as<const cuda::SampledToken>(), out_rows, picked);
  if (split.host_rows.empty()) return absl::OkStatus();
  return PickRowsOnHost(picks, split.host_rows, impl_->logits.as<const float>(),
                        impl_->vocab_stride, impl_->config.vocab_size, impl_->host_pick_logits,
                        impl_->stream, picked);
}

}  // namespace ridge
