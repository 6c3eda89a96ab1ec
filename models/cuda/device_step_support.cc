#include "models/cuda/device_step_support.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/few_rows_gemm.h"
#include "sampling/sampler.h"

namespace ridge {

absl::Status CheckDeviceExists(int device) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError("no CUDA device is available");
  }
  if (device < 0 || device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " does not exist (", devices, " found)"));
  }
  return absl::OkStatus();
}

absl::Status DeviceHealth(int device, cudaStream_t stream) {
  cudaError_t error = cudaSetDevice(device);
  if (error == cudaSuccess) error = cudaStreamQuery(stream);
  if (error == cudaSuccess || error == cudaErrorNotReady) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("CUDA device ", device,
                                             " failed: ", cudaGetErrorName(error), " (",
                                             cudaGetErrorString(error), ")"));
}

absl::StatusOr<cudaDeviceProp> HopperDeviceProperties(int device) {
  cudaDeviceProp prop{};
  RIDGE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  if (prop.major < 9) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", device, " (", prop.name, ") has compute capability ",
                     prop.major, ".", prop.minor, "; the kernels need 9.0 (Hopper) or newer"));
  }
  return prop;
}

absl::Status WeightGemm(const GemmContext& context, const void* x, int64_t rows, int64_t in,
                        const void* w, int64_t out, float* y, bool accumulate) {
  if (in * out <= kFewRowsMaxWeights && cuda::FewRowsGemmSupports(rows, out, in)) {
    const cuda::FewRowsGemmArgs args{x,
                                     w,
                                     y,
                                     static_cast<int32_t>(rows),
                                     static_cast<int32_t>(out),
                                     static_cast<int32_t>(in),
                                     static_cast<int32_t>(out),
                                     accumulate};
    RIDGE_CUDA_RETURN_IF_ERROR(cuda::LaunchFewRowsGemm(args, context.sm_count, context.stream));
    return absl::OkStatus();
  }
  // Seen column-major, y^T = w x^T.
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  RIDGE_CUBLAS_RETURN_IF_ERROR(
      cublasGemmEx(context.cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out),
                   static_cast<int>(rows), static_cast<int>(in), &alpha, w, CUDA_R_16BF,
                   static_cast<int>(in), x, CUDA_R_16BF, static_cast<int>(in), &beta, y, CUDA_R_32F,
                   static_cast<int>(out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

void BuildSamplingRows(std::span<const TokenPick> picks, int64_t rows,
                       std::vector<int32_t>& token_marks, cuda::SamplingRowParams* params,
                       std::vector<cuda::PenaltyEntry>* entries) {
  std::fill(params, params + rows, cuda::SamplingRowParams{});  // padding rows: greedy
  entries->clear();
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
    row.penalty_begin = static_cast<int32_t>(entries->size());
    // One entry per distinct token: the generated ones with their counts, then (only when the
    // repetition penalty is on) the prompt's other tokens.
    const bool repetition = p.repetition_penalty != 1.0f;
    if (repetition || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
      for (int32_t token : pick.generated) ++token_marks[token];
      for (int32_t token : pick.generated) {
        if (token_marks[token] <= 0) continue;
        entries->push_back({token, token_marks[token]});
        token_marks[token] = -1;  // listed
      }
      if (repetition) {
        for (int32_t token : pick.prompt) {
          if (token_marks[token] != 0) continue;
          entries->push_back({token, 0});
          token_marks[token] = -1;
        }
      }
      for (int32_t token : pick.generated) token_marks[token] = 0;
      for (int32_t token : pick.prompt) token_marks[token] = 0;
    }
    row.penalty_count = static_cast<int32_t>(entries->size()) - row.penalty_begin;
  }
  // The scored rows close the output, chunk by chunk: each takes its next token.
  int64_t at = rows - ScoredRows(picks);
  for (const TokenPick& pick : picks) {
    for (int32_t next : pick.score_next) {
      cuda::SamplingRowParams& row = params[at++];
      row.scored = 1;
      row.scored_token = next;
      row.logprobs = 1;
      row.top_logprobs = pick.score_top_logprobs;
    }
  }
}

absl::Status UploadSamplingRows(std::span<const TokenPick> picks, int64_t rows, int64_t vocab,
                                std::vector<int32_t>& token_marks,
                                const cuda::PinnedBuffer& host_params,
                                const cuda::DeviceBuffer& params,
                                const std::function<absl::Status(int64_t)>& grow_penalties,
                                const cuda::PinnedBuffer& host_penalties,
                                const cuda::DeviceBuffer& penalties, cudaStream_t stream) {
  if (token_marks.empty()) token_marks.assign(vocab, 0);
  auto* rows_on_host = host_params.as<cuda::SamplingRowParams>();
  std::vector<cuda::PenaltyEntry> entries;
  BuildSamplingRows(picks, rows, token_marks, rows_on_host, &entries);
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(params.as<void>(), rows_on_host,
                                             rows * sizeof(cuda::SamplingRowParams),
                                             cudaMemcpyHostToDevice, stream));
  if (entries.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(grow_penalties(static_cast<int64_t>(entries.size())));
  const size_t bytes = entries.size() * sizeof(cuda::PenaltyEntry);
  std::memcpy(host_penalties.as<void>(), entries.data(), bytes);
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(penalties.as<void>(), host_penalties.as<void>(), bytes,
                                             cudaMemcpyHostToDevice, stream));
  return absl::OkStatus();
}

void FillScoredOutRows(std::span<const TokenPick> picks, const int32_t* first_rows,
                       int32_t* out_rows) {
  for (size_t i = 0; i < picks.size(); ++i) {
    for (size_t r = 0; r < picks[i].score_next.size(); ++r) {
      *out_rows++ = first_rows[i] + static_cast<int32_t>(r);
    }
  }
}

namespace {

PickedToken FromDevice(const cuda::SampledToken& from, bool logprobs, int32_t top) {
  PickedToken to;
  to.token = from.token;
  to.rank = from.rank;  // 0 but for scored rows
  if (!logprobs) return to;
  to.logprob = from.logprob;
  for (int32_t n = 0; n < top && from.top_tokens[n] >= 0; ++n) {
    to.top.emplace_back(from.top_tokens[n], from.top_logprobs[n]);
  }
  return to;
}

}  // namespace

void CopyPicks(std::span<const TokenPick> picks, const cuda::SampledToken* sampled, int64_t rows,
               std::vector<PickedToken>* picked) {
  picked->assign(picks.size(), PickedToken{});
  int64_t scored_row = rows - ScoredRows(picks);
  for (size_t i = 0; i < picks.size(); ++i) {
    const TokenPick& pick = picks[i];
    PickedToken& to = (*picked)[i];
    if (pick.sampler != nullptr) to = FromDevice(sampled[i], pick.logprobs, pick.top_logprobs);
    for (size_t r = 0; r < pick.score_next.size(); ++r) {
      to.scored.push_back(FromDevice(sampled[scored_row++], true, pick.score_top_logprobs));
    }
  }
}

SplitPicks SplitHostPicks(std::span<const TokenPick> picks) {
  SplitPicks split;
  split.device.assign(picks.begin(), picks.end());
  for (size_t i = 0; i < picks.size(); ++i) {
    if (picks[i].sampler != nullptr &&
        picks[i].sampler->NeedsHostLogits(picks[i].generated.size())) {
      split.host_rows.push_back(i);
      split.device[i].sampler = nullptr;  // its scored rows, if any, stay on the device
    }
  }
  return split;
}

absl::Status PickRowsOnHost(std::span<const TokenPick> picks, std::span<const size_t> host_rows,
                            const float* logits, int64_t stride, int64_t vocab,
                            cuda::PinnedBuffer& host_logits, cudaStream_t stream,
                            std::vector<PickedToken>* picked) {
  const size_t row_bytes = static_cast<size_t>(vocab) * sizeof(float);
  if (host_logits.bytes() < host_rows.size() * row_bytes) {
    RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));  // no copy still writes it
    RETURN_IF_ERROR(host_logits.Allocate(host_rows.size() * row_bytes));
  }
  float* host = host_logits.as<float>();
  for (size_t k = 0; k < host_rows.size(); ++k) {
    RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host + k * vocab, logits + host_rows[k] * stride,
                                               row_bytes, cudaMemcpyDeviceToHost, stream));
  }
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  for (size_t k = 0; k < host_rows.size(); ++k) {
    const size_t row = host_rows[k];
    PickedToken pick = PickOnHost(picks[row], std::span<const float>(host + k * vocab, vocab));
    pick.scored = std::move((*picked)[row].scored);
    (*picked)[row] = std::move(pick);
  }
  return absl::OkStatus();
}

void MergeSolveCounters(const cuda::SolveCounters* counters, int64_t heads, SolverStats* stats) {
  for (int64_t h = 0; h < heads; ++h) {
    const cuda::SolveCounters& x = counters[h];
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

}  // namespace ridge
