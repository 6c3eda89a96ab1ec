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

}  // namespace ridge
