#include "models/cuda/device_memory.h"

#include <algorithm>

#include "base/half.h"
#include "kernels/cuda/cuda_check.h"

namespace ridge::cuda {

cudaError_t DeviceMemory::Allocate(void** ptr, size_t bytes) { return cudaMalloc(ptr, bytes); }
void DeviceMemory::Free(void* ptr) { cudaFree(ptr); }
cudaError_t PinnedMemory::Allocate(void** ptr, size_t bytes) { return cudaMallocHost(ptr, bytes); }
void PinnedMemory::Free(void* ptr) { cudaFreeHost(ptr); }

template <typename Memory>
absl::Status OwnedBuffer<Memory>::Allocate(size_t bytes) {
  Release();
  if (bytes == 0) return absl::OkStatus();
  if (const cudaError_t error = Memory::Allocate(&ptr_, bytes); error != cudaSuccess) {
    ptr_ = nullptr;
    cudaGetLastError();  // out of memory is not sticky: clear it so later launches do not see it
    return CudaStatus(error, Memory::kAllocator);
  }
  bytes_ = bytes;
  return absl::OkStatus();
}

template <typename Memory>
void OwnedBuffer<Memory>::Release() {
  if (ptr_ != nullptr) Memory::Free(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

template class OwnedBuffer<DeviceMemory>;
template class OwnedBuffer<PinnedMemory>;

void BufferRenewal::Commit() {
  for (auto& [target, fresh] : device_) *target = std::move(fresh);
  for (auto& [target, fresh] : pinned_) *target = std::move(fresh);
  device_.clear();
  pinned_.clear();
}

absl::StatusOr<DeviceBuffer> UploadAsBf16(const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = FloatToBf16(values[i]);
  DeviceBuffer buffer;
  if (absl::Status s = buffer.Allocate(bits.size() * sizeof(uint16_t)); !s.ok()) return s;
  RIDGE_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(buffer.as<void>(), bits.data(), buffer.bytes(), cudaMemcpyHostToDevice));
  return buffer;
}

absl::StatusOr<DeviceBuffer> UploadAsF32(const std::vector<float>& values) {
  DeviceBuffer buffer;
  if (absl::Status s = buffer.Allocate(values.size() * sizeof(float)); !s.ok()) return s;
  RIDGE_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(buffer.as<void>(), values.data(), buffer.bytes(), cudaMemcpyHostToDevice));
  return buffer;
}

absl::StatusOr<double> MeasureDeviceCopyBandwidth(size_t bytes_moved) {
  const size_t half = bytes_moved / 2;
  DeviceBuffer src, dst;
  if (absl::Status s = src.Allocate(half); !s.ok()) return s;
  if (absl::Status s = dst.Allocate(half); !s.ok()) return s;
  RIDGE_CUDA_RETURN_IF_ERROR(cudaMemset(src.as<void>(), 1, half));
  cudaEvent_t start, stop;
  RIDGE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  RIDGE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i < 12; ++i) {
    RIDGE_CUDA_RETURN_IF_ERROR(cudaEventRecord(start));
    RIDGE_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(dst.as<void>(), src.as<void>(), half, cudaMemcpyDeviceToDevice));
    RIDGE_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop));
    RIDGE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
    float elapsed = 0;
    RIDGE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&elapsed, start, stop));
    if (i >= 2) ms.push_back(elapsed);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return 2.0 * static_cast<double>(half) / (ms[ms.size() / 2] * 1e-3);
}

}  // namespace ridge::cuda
