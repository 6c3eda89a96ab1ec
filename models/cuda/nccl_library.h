// NCCL, loaded at run time: dlopen of $RIDGE_NCCL_LIBRARY, else of libnccl.so.2 on the loader's
// path (a system package, or the nvidia-nccl wheel PyTorch and vLLM install). The few calls the
// tensor-parallel collectives make are declared here with NCCL 2.x's C ABI (its nccl.h: these
// enum values and signatures have not changed since 2.0), so the build needs no NCCL and a
// machine without it runs everything else.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace ridge::nccl {

using Comm = struct ncclComm*;
using Result = int;                       // ncclResult_t: 0 is ncclSuccess
inline constexpr int kFloat32 = 7;        // ncclFloat32
inline constexpr int kSum = 0;            // ncclSum
inline constexpr Result kInProgress = 7;  // ncclInProgress (non-blocking communicators)

struct Api {
  Result (*GetVersion)(int* version);
  Result (*CommInitAll)(Comm* comms, int count, const int* devices);
  Result (*CommDestroy)(Comm comm);
  Result (*CommAbort)(Comm comm);
  Result (*CommGetAsyncError)(Comm comm, Result* error);
  Result (*AllReduce)(const void* send, void* receive, size_t count, int type, int op, Comm comm,
                      cudaStream_t stream);
  const char* (*GetErrorString)(Result result);
  int version = 0;  // e.g. 22703 for 2.27.3
};

// The library's entry points, loaded once; an error names what was tried and why it failed.
absl::StatusOr<const Api*> Load();
// The same from `path`, not cached (Load's work; for tests).
absl::StatusOr<Api> Open(const std::string& path);

// An error naming `what` and NCCL's message for `result` (OK for 0).
absl::Status Check(const Api& api, Result result, const char* what);

}  // namespace ridge::nccl
