// What accelerators this process can use, detected at run time.
#pragma once

#include <string>
#include <vector>

namespace ridge {

struct CudaDeviceInfo {
  std::string name;
  size_t total_memory_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
};

// Empty when the build has no CUDA support, no driver is installed or no GPU is present.
std::vector<CudaDeviceInfo> QueryCudaDevices();
bool BuiltWithCuda();

}  // namespace ridge
