// One rank's end of a group of ranks that run a tensor-parallel model in lock-step
// (models/tensor_parallel.h): the collectives its forward pass needs. Every rank of the group
// calls the same collectives in the same order with the same sizes. A collective that cannot
// complete (another rank failed, or did not arrive within the group's time-out) returns an error
// on every rank instead of waiting forever.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace ridge {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;

  // data[count] becomes, on every rank, the sum of every rank's data[count], added in rank order
  // (so every rank gets the same bits, and the same bits from one step to the next).
  virtual absl::Status AllReduceSum(float* data, int64_t count) = 0;

  // Rank 0's full[rows, full_columns] receives every rank's local[rows, columns] at columns
  // [first_column, first_column + columns); the ranks' column ranges do not overlap. `full` is
  // ignored on other ranks.
  virtual absl::Status GatherColumns(const float* local, int64_t rows, int64_t first_column,
                                     int64_t columns, float* full, int64_t full_columns) = 0;

  // Fails the collective every rank is in or enters next with `why` (a rank that failed between
  // collectives calls this so that the others do not wait for it).
  virtual void Abort(const absl::Status& why) = 0;
};

}  // namespace ridge
