// Reads a checkpoint's tensors by name with shape checks, and remembers which ones were used so
// a loader can refuse tensors it does not know. Errors name the tensor.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/weight_gemm.h"
#include "models/checkpoint.h"

namespace ridge {

class TensorReader {
 public:
  explicit TensorReader(const Checkpoint& checkpoint) : checkpoint_(checkpoint) {}

  // Appends the tensor's values (as float) to `out`.
  absl::Status Append(const std::string& name, std::vector<int64_t> shape, std::vector<float>* out);
  absl::Status Read(const std::string& name, std::vector<int64_t> shape, std::vector<float>* out);
  // A [rows, cols] tensor in its own dtype, where it lies in the mapped file (no copy).
  absl::StatusOr<WeightMatrix> Matrix(const std::string& name, int64_t rows, int64_t cols);

  bool Has(const std::string& name) const { return checkpoint_.Find(name) != nullptr; }
  void Ignore(const std::string& name) { used_.insert(name); }
  // An error listing the tensors no loader asked for (the first five), or OK.
  absl::Status RefuseUnused() const;

 private:
  std::vector<std::string> Unused() const;
  absl::StatusOr<const TensorView*> Find(const std::string& name,
                                         const std::vector<int64_t>& shape);

  const Checkpoint& checkpoint_;
  std::set<std::string> used_;
};

}  // namespace ridge
