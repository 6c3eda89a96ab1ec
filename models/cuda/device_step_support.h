// What every CUDA backend does the same way, whatever the model: the device checks of Create, the
// weight products (bf16 weights, fp32 accumulation), the host side of picking tokens on the
// device (each row's sampling parameters and penalty entries in, the picks out), and the solver
// counters merged into a chunk's SolverStats. Not for use outside models/cuda.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cuda/solve_counters.h"
#include "kernels/cuda/token_sampling.h"
#include "kernels/solver_types.h"
#include "models/cuda/device_memory.h"
#include "models/model_backend.h"

namespace ridge {

// The largest weight matrix (elements) that products of few rows give to cuda::LaunchFewRowsGemm.
// cuBLAS streams larger ones faster (H200: the 1B config's in-projection, 7M elements, 6.4 us
// against 6.8 at 1 row and 8.7 at 16; its o_proj, 2.4M, 6.2 against 3.3 at 1 row).
inline constexpr int64_t kFewRowsMaxWeights = int64_t{4} << 20;

// OK when CUDA device `device` exists: kFailedPrecondition without any device, kInvalidArgument
// naming the count when the index is out of range.
absl::Status CheckDeviceExists(int device);
// The device's properties once it is known to exist; kFailedPrecondition naming it when its
// compute capability is below 9.0 (the kernels are built for Hopper).
absl::StatusOr<cudaDeviceProp> HopperDeviceProperties(int device);
// A backend's ModelBackend::Health on `device`: OK unless its CUDA context holds a sticky error
// (an illegal address, a launch failure: every later call returns it, so no step can succeed
// again), then kUnavailable naming it. Does not wait for `stream`.
absl::Status DeviceHealth(int device, cudaStream_t stream);

struct GemmContext {
  cublasHandle_t cublas = nullptr;
  cudaStream_t stream = nullptr;
  int32_t sm_count = 0;
};

// Row-major y[rows, out] (+)= x[rows, in] (bf16) * w[out, in]^T (bf16), fp32 y. Steps of up to
// 32 rows take the project's own kernel for products of up to kFewRowsMaxWeights (1.1x to 2.5x
// cuBLAS's speed there on an H200, tools/bench/RESULTS.md); everything else goes to cuBLAS.
absl::Status WeightGemm(const GemmContext& context, const void* x, int64_t rows, int64_t in,
                        const void* w, int64_t out, float* y, bool accumulate);

// Fills params[0, rows) and the penalty entries of a sampled step from its picks (checked by
// ModelBackend::ValidatePicks): row i is pick i's, the last ScoredRows(picks) rows are the
// scored rows (pick by pick, each forced to its next token), the rows between are padding.
// token_marks: [vocab] zeros, left zero.
void BuildSamplingRows(std::span<const TokenPick> picks, int64_t rows,
                       std::vector<int32_t>& token_marks, cuda::SamplingRowParams* params,
                       std::vector<cuda::PenaltyEntry>* entries);

// BuildSamplingRows into host_params, then the copies of the rows and of the penalty entries to
// the device queued on `stream`; grow_penalties(n) first makes the penalty buffers hold n
// entries (each backend grows its own way). token_marks is sized to `vocab` on first use.
absl::Status UploadSamplingRows(std::span<const TokenPick> picks, int64_t rows, int64_t vocab,
                                std::vector<int32_t>& token_marks,
                                const cuda::PinnedBuffer& host_params,
                                const cuda::DeviceBuffer& params,
                                const std::function<absl::Status(int64_t)>& grow_penalties,
                                const cuda::PinnedBuffer& host_penalties,
                                const cuda::DeviceBuffer& penalties, cudaStream_t stream);

// A sampled step's picks split between the device's sampler and the host: `host_rows` are the
// rows the device cannot pick (a logit bias, a JSON mask: Sampler::NeedsHostLogits), and in
// `device` their picks have no sampler, so the device treats them as padding (greedy, no
// penalties) and leaves their logits as the model wrote them; their scored rows stay.
struct SplitPicks {
  std::vector<TokenPick> device;
  std::vector<size_t> host_rows;
};
SplitPicks SplitHostPicks(std::span<const TokenPick> picks);

// Copies rows `host_rows` of the device's logits ([*, stride] floats, `vocab` used) into
// `host_logits` (grown to fit; pinned), then picks each on the host with its pick into
// (*picked)[row]. Call after the step's work on `stream` has written the logits.
absl::Status PickRowsOnHost(std::span<const TokenPick> picks, std::span<const size_t> host_rows,
                            const float* logits, int64_t stride, int64_t vocab,
                            cuda::PinnedBuffer& host_logits, cudaStream_t stream,
                            std::vector<PickedToken>* picked);

// The step's scored rows as output rows, written to out_rows[0, ScoredRows(picks)): pick i's
// score_next.size() first rows of its chunk, which begins at row first_rows[i], pick by pick
// (the order BuildSamplingRows and CopyPicks take them in).
void FillScoredOutRows(std::span<const TokenPick> picks, const int32_t* first_rows,
                       int32_t* out_rows);

// The device's picks as the caller's PickedTokens: sampled[i] is pick i's token, the last
// ScoredRows(picks) of the step's `rows` output rows its scored rows (BuildSamplingRows).
void CopyPicks(std::span<const TokenPick> picks, const cuda::SampledToken* sampled, int64_t rows,
               std::vector<PickedToken>* picked);

// One sequence's counters of `heads` heads added to its stats.
void MergeSolveCounters(const cuda::SolveCounters* counters, int64_t heads, SolverStats* stats);

}  // namespace ridge
