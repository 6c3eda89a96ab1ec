// The head dims the GPU token-mixer kernels are instantiated for, in one place: a run-time
// head_dim becomes the compile-time D of a kernel template.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>
#include <utility>

namespace ridge::cuda {

// Returns f(std::integral_constant<int, D>{}) for D == head_dim, or `unsupported` for a head_dim
// no kernel is instantiated for.
template <typename Result, typename F>
Result ForHeadDim(int head_dim, Result unsupported, F&& f) {
  switch (head_dim) {
    case 64:
      return f(std::integral_constant<int, 64>{});
    case 128:
      return f(std::integral_constant<int, 128>{});
    default:
      return unsupported;
  }
}

// Returns launch(std::integral_constant<int, D>{}) for D == head_dim, or
// cudaErrorInvalidValue for an unsupported head_dim.
template <typename Launch>
cudaError_t DispatchHeadDim(int head_dim, Launch&& launch) {
  return ForHeadDim(head_dim, cudaErrorInvalidValue, std::forward<Launch>(launch));
}

inline bool IsSupportedHeadDim(int head_dim) {
  return ForHeadDim(head_dim, false, [](auto) { return true; });
}

}  // namespace ridge::cuda
