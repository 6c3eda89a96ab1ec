// The head dims the GPU token-mixer kernels are instantiated for, in one place: a run-time
// head_dim becomes the compile-time D of a kernel template.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

namespace ridge::cuda {

inline bool IsSupportedHeadDim(int head_dim) { return head_dim == 64 || head_dim == 128; }

// Returns launch(std::integral_constant<int, D>{}) for D == head_dim, or
// cudaErrorInvalidValue for an unsupported head_dim.
template <typename Launch>
cudaError_t DispatchHeadDim(int head_dim, Launch&& launch) {
  switch (head_dim) {
    case 64:
      return launch(std::integral_constant<int, 64>{});
    case 128:
      return launch(std::integral_constant<int, 128>{});
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace ridge::cuda
