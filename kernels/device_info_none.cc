// Device query for builds without CUDA.
#include "kernels/device_info.h"

namespace ridge {

std::vector<CudaDeviceInfo> QueryCudaDevices() { return {}; }
bool BuiltWithCuda() { return false; }

}  // namespace ridge
