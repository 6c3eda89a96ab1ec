#include "models/tensor_reader.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace ridge {

absl::StatusOr<const TensorView*> TensorReader::Find(const std::string& name,
                                                     const std::vector<int64_t>& shape) {
  const TensorView* view = checkpoint_.Find(name);
  if (view == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " is missing from ", checkpoint_.dir().string()));
  }
  if (view->shape != shape) {
    TensorView expected;
    expected.shape = shape;
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", name, ": expected ", expected.ShapeString(), ", found ", view->ShapeString()));
  }
  used_.insert(name);
  return view;
}

absl::Status TensorReader::Append(const std::string& name, std::vector<int64_t> shape,
                                  std::vector<float>* out) {
  ASSIGN_OR_RETURN(const TensorView* view, Find(name, shape));
  const size_t offset = out->size();
  out->resize(offset + view->NumElements());
  CopyToFloat(*view, out->data() + offset);
  return absl::OkStatus();
}

absl::Status TensorReader::Read(const std::string& name, std::vector<int64_t> shape,
                                std::vector<float>* out) {
  out->clear();
  return Append(name, std::move(shape), out);
}

absl::StatusOr<WeightMatrix> TensorReader::Matrix(const std::string& name, int64_t rows,
                                                  int64_t cols) {
  ASSIGN_OR_RETURN(const TensorView* view, Find(name, {rows, cols}));
  return WeightMatrix{view->data, view->dtype, rows, cols};
}

std::vector<std::string> TensorReader::Unused() const {
  std::vector<std::string> unused;
  for (const auto& name : checkpoint_.TensorNames()) {
    if (!used_.contains(name)) unused.push_back(name);
  }
  return unused;
}

absl::Status TensorReader::RefuseUnused() const {
  const std::vector<std::string> unused = Unused();
  if (unused.empty()) return absl::OkStatus();
  const size_t shown = std::min<size_t>(unused.size(), 5);
  return absl::InvalidArgumentError(absl::StrCat(
      checkpoint_.dir().string(), ": ", unused.size(),
      " unexpected tensor(s) that this config does not use (an unsupported variant?): ",
      absl::StrJoin(unused.begin(), unused.begin() + shown, ", "),
      unused.size() > shown ? ", ..." : ""));
}

}  // namespace ridge
