// Error checking for CUDA runtime and cuBLAS calls in host code: every call's status is turned
// into an absl::Status naming the call, so a failing GPU step reports what failed instead of
// computing on garbage.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "absl/status/status.h"

namespace ridge::cuda {

inline absl::Status CudaStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  // Reported here: the runtime's last error is cleared, so that a launch checked later with
  // cudaGetLastError does not report this call's error again (a sticky error stays).
  (void)cudaGetLastError();
  std::string message = std::string("CUDA error in ") + what + ": " + cudaGetErrorString(error);
  if (error == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(std::move(message));
  return absl::InternalError(std::move(message));
}

inline absl::Status CublasStatus(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(std::string("cuBLAS error in ") + what + ": " +
                             cublasGetStatusString(status));
}

}  // namespace ridge::cuda

#define RIDGE_CUDA_RETURN_IF_ERROR(call)                                       \
  do {                                                                         \
    if (absl::Status _ridge_status = ::ridge::cuda::CudaStatus((call), #call); \
        !_ridge_status.ok())                                                   \
      return _ridge_status;                                                    \
  } while (0)

#define RIDGE_CUBLAS_RETURN_IF_ERROR(call)                                       \
  do {                                                                           \
    if (absl::Status _ridge_status = ::ridge::cuda::CublasStatus((call), #call); \
        !_ridge_status.ok())                                                     \
      return _ridge_status;                                                      \
  } while (0)
