// Opting a kernel in to more than 48 KB of dynamic shared memory. The setting belongs to the
// kernel in the current device's context, so it is made once per (kernel, device) rather than
// once per process: a second GPU in the same process gets it too.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <utility>

namespace ridge::cuda {

inline cudaError_t AllowDynamicSharedMemory(const void* kernel, size_t bytes) {
  constexpr size_t kWithoutOptIn = 48 << 10;  // every kernel may have this much
  if (bytes <= kWithoutOptIn) return cudaSuccess;
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, size_t> allowed;  // guarded by mutex
  std::lock_guard<std::mutex> lock(mutex);
  size_t& done = allowed[{kernel, device}];
  if (done >= bytes) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(bytes));
  if (e == cudaSuccess) done = bytes;
  return e;
}

// Launches kernel<<<grid, block, smem_bytes, stream>>>(args...) after opting it in to
// smem_bytes of dynamic shared memory. CUDA code only (the launch syntax needs nvcc).
template <typename... Params, typename... Args>
cudaError_t LaunchWithDynamicSharedMemory(void (*kernel)(Params...), dim3 grid, dim3 block,
                                          size_t smem_bytes, cudaStream_t stream,
                                          const Args&... args) {
  if (cudaError_t e = AllowDynamicSharedMemory(reinterpret_cast<const void*>(kernel), smem_bytes);
      e != cudaSuccess) {
    return e;
  }
  kernel<<<grid, block, smem_bytes, stream>>>(args...);
  return cudaGetLastError();
}

}  // namespace ridge::cuda
