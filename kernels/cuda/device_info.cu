// Device query through the CUDA runtime; a machine without a driver or GPU reports none.
#include <cuda_runtime.h>

#include "kernels/device_info.h"

namespace ridge {

std::vector<CudaDeviceInfo> QueryCudaDevices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return {};
  }
  std::vector<CudaDeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    devices.push_back({prop.name, prop.totalGlobalMem, prop.major, prop.minor});
  }
  return devices;
}

bool BuiltWithCuda() { return true; }

}  // namespace ridge
