// One rank's end of a group of GPU ranks running a tensor-parallel model in lock-step
// (models/tensor_parallel.h): models/collective.h's collectives for buffers in the rank's GPU
// memory, ordered on its stream. Every rank calls the same collectives in the same order with the
// same sizes; one that cannot complete returns an error on every rank instead of waiting forever.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/cuda/nccl_library.h"

namespace ridge {

class Collective;

class DeviceCollective {
 public:
  virtual ~DeviceCollective() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;

  // data[count] becomes, on every rank, the sum of every rank's data[count] (the same bits on
  // every rank).
  virtual absl::Status AllReduceSum(float* data, int64_t count, cudaStream_t stream) = 0;

  // Rank 0's full (rows of full_stride floats) receives, at columns [first_column, first_column +
  // columns), every rank's local (rows of local_stride floats, columns [0, columns)); the ranks'
  // ranges do not overlap. `full` is ignored on other ranks.
  virtual absl::Status GatherColumns(const float* local, int64_t rows, int64_t local_stride,
                                     int64_t first_column, int64_t columns, float* full,
                                     int64_t full_stride, cudaStream_t stream) = 0;

  // Whether its calls may be captured into a CUDA graph.
  virtual bool capturable() const = 0;

  // Fails the collective every rank is in or enters next (see Collective::Abort).
  virtual void Abort(const absl::Status& why) = 0;
};

// Through host memory and a host Collective (ranks that are threads of this process, on one GPU
// or several): each call waits for the stream, copies the data out, runs the host collective and
// copies the result back. It runs anywhere, including several ranks on one GPU, at the cost of a
// wait and two copies a call, so steps that use it are not captured in graphs; NCCL's collective
// is what a multi-GPU deployment wants.
class HostStagedCollective : public DeviceCollective {
 public:
  explicit HostStagedCollective(Collective* host) : host_(host) {}

  int32_t rank() const override;
  int32_t size() const override;
  absl::Status AllReduceSum(float* data, int64_t count, cudaStream_t stream) override;
  absl::Status GatherColumns(const float* local, int64_t rows, int64_t local_stride,
                             int64_t first_column, int64_t columns, float* full,
                             int64_t full_stride, cudaStream_t stream) override;
  bool capturable() const override { return false; }
  void Abort(const absl::Status& why) override;

 private:
  Collective* host_;
  std::vector<float> local_, full_;
};

class NcclGroup;

// NCCL's collectives for ranks on distinct GPUs of this process, in stream order and capturable
// (decode steps replay graphs). GatherColumns zeroes `full` on every rank, copies the rank's
// columns into it and sums it over the group, so every rank ends with the whole rows (for the
// logits: rows x vocabulary floats, small beside a decode step's other traffic).
class NcclCollective : public DeviceCollective {
 public:
  NcclCollective(NcclGroup* group, int32_t rank) : group_(group), rank_(rank) {}

  int32_t rank() const override { return rank_; }
  int32_t size() const override;
  absl::Status AllReduceSum(float* data, int64_t count, cudaStream_t stream) override;
  absl::Status GatherColumns(const float* local, int64_t rows, int64_t local_stride,
                             int64_t first_column, int64_t columns, float* full,
                             int64_t full_stride, cudaStream_t stream) override;
  bool capturable() const override { return true; }
  // Aborts every communicator of the group (ncclCommAbort ends the operations the other ranks
  // wait in); the group fails every collective from then on.
  void Abort(const absl::Status& why) override;

 private:
  NcclGroup* group_;
  int32_t rank_;
};

// The communicators of ranks on `devices` (one rank a GPU, no GPU twice: NCCL refuses that),
// made together by ncclCommInitAll. An aborted group stays failed: its communicators are gone,
// and so are the graphs that captured them, so the process must be restarted to split again.
class NcclGroup {
 public:
  static absl::StatusOr<std::unique_ptr<NcclGroup>> Create(const std::vector<int>& devices);
  ~NcclGroup();

  int32_t size() const { return static_cast<int32_t>(comms_.size()); }
  NcclCollective& rank(int32_t r) { return *ranks_[r]; }
  int nccl_version() const { return api_->version; }

  // OK, or why the group was aborted.
  absl::Status failure() const;
  void AbortAll(const absl::Status& why);
  // The communicator of rank r, or the abort's error.
  absl::StatusOr<nccl::Comm> Communicator(int32_t r) const;
  const nccl::Api& api() const { return *api_; }

 private:
  explicit NcclGroup(const nccl::Api* api) : api_(api) {}

  const nccl::Api* api_;
  std::vector<nccl::Comm> comms_;
  std::vector<std::unique_ptr<NcclCollective>> ranks_;
  mutable std::mutex mutex_;
  absl::Status aborted_;  // guarded by mutex_
};

}  // namespace ridge
