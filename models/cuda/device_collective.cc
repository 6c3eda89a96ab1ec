#include "models/cuda/device_collective.h"

#include "base/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "models/collective.h"

namespace ridge {

int32_t HostStagedCollective::rank() const { return host_->rank(); }
int32_t HostStagedCollective::size() const { return host_->size(); }
void HostStagedCollective::Abort(const absl::Status& why) { host_->Abort(why); }

absl::Status HostStagedCollective::AllReduceSum(float* data, int64_t count, cudaStream_t stream) {
  local_.resize(count);
  RIDGE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(local_.data(), data, count * sizeof(float), cudaMemcpyDeviceToHost, stream));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  RETURN_IF_ERROR(host_->AllReduceSum(local_.data(), count));
  RIDGE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(data, local_.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream));
  // The host buffer is reused by the next call: the copy must be done with it first.
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

absl::Status HostStagedCollective::GatherColumns(const float* local, int64_t rows,
                                                 int64_t local_stride, int64_t first_column,
                                                 int64_t columns, float* full, int64_t full_stride,
                                                 cudaStream_t stream) {
  local_.resize(rows * columns);
  const bool root = host_->rank() == 0;
  if (root) full_.assign(rows * full_stride, 0.0f);
  if (rows > 0 && columns > 0) {
    RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
        local_.data(), columns * sizeof(float), local, local_stride * sizeof(float),
        columns * sizeof(float), rows, cudaMemcpyDeviceToHost, stream));
  }
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  RETURN_IF_ERROR(host_->GatherColumns(local_.data(), rows, first_column, columns,
                                       root ? full_.data() : nullptr, full_stride));
  if (!root || rows == 0) return absl::OkStatus();
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(full, full_.data(), rows * full_stride * sizeof(float),
                                             cudaMemcpyHostToDevice, stream));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return absl::OkStatus();
}

}  // namespace ridge
