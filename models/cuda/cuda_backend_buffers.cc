// Step buffers of the CUDA backend: grown all or nothing (a failed growth keeps the old ones).
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "models/cuda/cuda_backend_impl.h"

namespace ridge {

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
  // A row per output row: each sequence's last, and the rows it scores (prompt logprobs).
  const size_t params_bytes = new_rows * sizeof(cuda::SamplingRowParams);
  const size_t sampled_bytes = new_rows * sizeof(cuda::SampledToken);
  RETURN_IF_ERROR(renew.Device(&sampling_params, params_bytes));
  RETURN_IF_ERROR(renew.Pinned(&host_sampling_params, params_bytes));
  RETURN_IF_ERROR(renew.Device(&sampled, sampled_bytes));
  RETURN_IF_ERROR(renew.Pinned(&host_sampled, sampled_bytes));
  graphs.Clear();
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
  graphs.Clear();
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
  graphs.Clear();
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

}  // namespace ridge
