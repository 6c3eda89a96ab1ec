// The element types of checkpoint tensors.
#pragma once

#include <cstddef>

namespace ridge {

enum class DType { kF32, kF16, kBF16 };

inline const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
  }
  return "?";
}

inline size_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

}  // namespace ridge
