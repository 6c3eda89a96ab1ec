// A validated, memory-mapped view of one .safetensors file.
//
// Every field of the header is checked before any tensor byte is touched, so a truncated,
// corrupt or hostile file yields an error naming the tensor and the problem, never an
// out-of-bounds read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/dtype.h"

namespace ridge {

struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // not necessarily aligned: read with memcpy
  size_t num_bytes = 0;

  int64_t NumElements() const;
  std::string ShapeString() const;
};

// Converts a tensor of any supported dtype to float32; `out` must hold NumElements() floats.
void CopyToFloat(const TensorView& tensor, float* out);

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  SafetensorsFile() = default;

  std::filesystem::path path_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  std::vector<TensorView> tensors_;
};

// Parses a header already read from a file whose payload (bytes after the header) is
// `payload` of `payload_size` bytes. Exposed for tests and fuzzing.
absl::StatusOr<std::vector<TensorView>> ParseSafetensorsHeader(std::string_view header_json,
                                                               const std::byte* payload,
                                                               size_t payload_size);

}  // namespace ridge
