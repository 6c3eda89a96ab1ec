// Owning handles for device and pinned host memory, and bf16/fp32 uploads of host weights.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ridge::cuda {

// Where a buffer's memory comes from: the device (cudaMalloc), or page-locked host memory
// (cudaMallocHost), so device copies are asynchronous and fast.
struct DeviceMemory {
  static constexpr const char* kAllocator = "cudaMalloc";
  static cudaError_t Allocate(void** ptr, size_t bytes);
  static void Free(void* ptr);
};
struct PinnedMemory {
  static constexpr const char* kAllocator = "cudaMallocHost";
  static cudaError_t Allocate(void** ptr, size_t bytes);
  static void Free(void* ptr);
};

// An owning, movable handle for one allocation.
template <typename Memory>
class OwnedBuffer {
 public:
  OwnedBuffer() = default;
  ~OwnedBuffer() { Release(); }
  OwnedBuffer(OwnedBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  OwnedBuffer& operator=(OwnedBuffer&& other) noexcept {
    if (this != &other) {
      Release();
      ptr_ = std::exchange(other.ptr_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }

  // Frees any previous allocation first; contents are undefined. On failure the buffer is
  // empty and the CUDA runtime's last error is cleared (out of memory is not sticky).
  absl::Status Allocate(size_t bytes);
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  bool empty() const { return ptr_ == nullptr; }

 private:
  void Release();
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceBuffer = OwnedBuffer<DeviceMemory>;
using PinnedBuffer = OwnedBuffer<PinnedMemory>;
extern template class OwnedBuffer<DeviceMemory>;
extern template class OwnedBuffer<PinnedMemory>;

// Grows a set of buffers all or nothing: each Device/Pinned call allocates a fresh buffer on the
// side, and Commit() moves them all into place. If any allocation fails (out of memory), the
// caller returns the error before Commit and every old buffer is still there, unchanged.
class BufferRenewal {
 public:
  absl::Status Device(DeviceBuffer* target, size_t bytes) { return Renew(target, bytes, device_); }
  absl::Status Pinned(PinnedBuffer* target, size_t bytes) { return Renew(target, bytes, pinned_); }
  void Commit();

 private:
  template <typename Buffer>
  static absl::Status Renew(Buffer* target, size_t bytes,
                            std::vector<std::pair<Buffer*, Buffer>>& fresh_buffers) {
    Buffer fresh;
    if (absl::Status s = fresh.Allocate(bytes); !s.ok()) return s;
    fresh_buffers.emplace_back(target, std::move(fresh));
    return absl::OkStatus();
  }

  std::vector<std::pair<DeviceBuffer*, DeviceBuffer>> device_;
  std::vector<std::pair<PinnedBuffer*, PinnedBuffer>> pinned_;
};

// Copies host floats to a new device buffer, as bf16 (round to nearest even) or as fp32.
absl::StatusOr<DeviceBuffer> UploadAsBf16(const std::vector<float>& values);
absl::StatusOr<DeviceBuffer> UploadAsF32(const std::vector<float>& values);

// Device-to-device cudaMemcpy rate in bytes/s counting bytes read plus bytes written (the
// ceiling a memory-bound kernel is compared against): the median of 10 timed copies of
// `bytes_moved` / 2 bytes after a warm-up.
absl::StatusOr<double> MeasureDeviceCopyBandwidth(size_t bytes_moved);

}  // namespace ridge::cuda
