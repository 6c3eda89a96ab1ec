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

absl::StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::Create(const std::vector<int>& devices) {
  ASSIGN_OR_RETURN(const nccl::Api* api, nccl::Load());
  for (size_t i = 0; i < devices.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (devices[i] == devices[j]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "NCCL takes one rank a GPU; ranks ", j, " and ", i, " are both on GPU ", devices[i]));
      }
    }
  }
  std::unique_ptr<NcclGroup> group(new NcclGroup(api));
  group->comms_.assign(devices.size(), nullptr);
  RETURN_IF_ERROR(nccl::Check(
      *api,
      api->CommInitAll(group->comms_.data(), static_cast<int>(devices.size()), devices.data()),
      "ncclCommInitAll"));
  for (size_t r = 0; r < devices.size(); ++r) {
    group->ranks_.push_back(std::make_unique<NcclCollective>(group.get(), static_cast<int32_t>(r)));
  }
  return group;
}

NcclGroup::~NcclGroup() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!aborted_.ok()) return;  // aborted communicators are freed already
  for (nccl::Comm comm : comms_) {
    if (comm != nullptr) api_->CommDestroy(comm);
  }
}

absl::Status NcclGroup::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_;
}

void NcclGroup::AbortAll(const absl::Status& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!aborted_.ok()) return;
  aborted_ = absl::Status(why.ok() ? absl::StatusCode::kInternal : why.code(),
                          absl::StrCat("the tensor-parallel group was aborted (", why.message(),
                                       "); restart the server to split the model again"));
  for (nccl::Comm comm : comms_) {
    if (comm != nullptr) api_->CommAbort(comm);
  }
}

absl::StatusOr<nccl::Comm> NcclGroup::Communicator(int32_t r) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!aborted_.ok()) return aborted_;
  return comms_[r];
}

int32_t NcclCollective::size() const { return group_->size(); }
void NcclCollective::Abort(const absl::Status& why) { group_->AbortAll(why); }

absl::Status NcclCollective::AllReduceSum(float* data, int64_t count, cudaStream_t stream) {
  ASSIGN_OR_RETURN(const nccl::Comm comm, group_->Communicator(rank_));
  const nccl::Api& api = group_->api();
  return nccl::Check(api,
                     api.AllReduce(data, data, static_cast<size_t>(count), nccl::kFloat32,
                                   nccl::kSum, comm, stream),
                     "ncclAllReduce");
}

absl::Status NcclCollective::GatherColumns(const float* local, int64_t rows, int64_t local_stride,
                                           int64_t first_column, int64_t columns, float* full,
                                           int64_t full_stride, cudaStream_t stream) {
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(full, 0, rows * full_stride * sizeof(float), stream));
  if (rows > 0 && columns > 0) {
    RIDGE_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
        full + first_column, full_stride * sizeof(float), local, local_stride * sizeof(float),
        columns * sizeof(float), rows, cudaMemcpyDeviceToDevice, stream));
  }
  return AllReduceSum(full, rows * full_stride, stream);
}

}  // namespace ridge
