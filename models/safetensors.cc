#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/half.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace ridge {
namespace {

// Real headers are a few hundred KiB at most; this bound stops a hostile length field from
// making us parse gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr size_t kMaxRank = 8;

absl::StatusOr<DType> ParseDType(const std::string& name, const std::string& tensor) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  return absl::InvalidArgumentError(absl::StrCat("tensor ", tensor, ": dtype ", name,
                                                 " is not supported (expected BF16, F16 or F32)"));
}

absl::StatusOr<TensorView> ParseEntry(const std::string& name, const nlohmann::json& entry,
                                      const std::byte* payload, size_t payload_size) {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, ": ", what));
  };
  if (!entry.is_object()) return fail("header entry is not an object");
  const auto dtype_it = entry.find("dtype");
  const auto shape_it = entry.find("shape");
  const auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end() || !dtype_it->is_string()) return fail("missing string 'dtype'");
  if (shape_it == entry.end() || !shape_it->is_array()) return fail("missing array 'shape'");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    return fail("'data_offsets' must be an array of two integers");
  }
  TensorView view;
  view.name = name;
  ASSIGN_OR_RETURN(view.dtype, ParseDType(dtype_it->get<std::string>(), name));
  if (shape_it->size() > kMaxRank) return fail(absl::StrCat("rank above ", kMaxRank));

  // Element count with overflow checks: a hostile shape must not wrap around.
  uint64_t elements = 1;
  for (const auto& dim : *shape_it) {
    if (!dim.is_number_unsigned()) return fail("shape entries must be non-negative integers");
    const uint64_t d = dim.get<uint64_t>();
    if (d != 0 && elements > std::numeric_limits<uint64_t>::max() / d)
      return fail("shape overflows");
    elements *= d;
    view.shape.push_back(static_cast<int64_t>(d));
  }
  for (const auto& offset : *offsets_it) {
    if (!offset.is_number_unsigned()) return fail("data_offsets must be non-negative integers");
  }
  const uint64_t begin = (*offsets_it)[0].get<uint64_t>();
  const uint64_t end = (*offsets_it)[1].get<uint64_t>();
  if (begin > end) return fail(absl::StrCat("data_offsets [", begin, ", ", end, "] are reversed"));
  if (end > payload_size) {
    return fail(absl::StrCat("data_offsets end ", end, " lies beyond the file's data section of ",
                             payload_size, " bytes (truncated file?)"));
  }
  const uint64_t item = DTypeSize(view.dtype);
  if (elements > std::numeric_limits<uint64_t>::max() / item || elements * item != end - begin) {
    return fail(absl::StrCat("shape ", view.ShapeString(), " of ", DTypeName(view.dtype), " needs ",
                             elements * item, " bytes but data_offsets span ", end - begin));
  }
  view.data = payload + begin;
  view.num_bytes = end - begin;
  return view;
}

absl::Status CheckNoOverlap(std::vector<TensorView>& tensors, const std::byte* payload) {
  std::vector<const TensorView*> by_offset;
  for (const auto& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorView* a, const TensorView* b) { return a->data < b->data; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorView& prev = *by_offset[i - 1];
    const TensorView& cur = *by_offset[i];
    if (prev.data + prev.num_bytes > cur.data) {
      return absl::InvalidArgumentError(absl::StrCat("tensors ", prev.name, " and ", cur.name,
                                                     " overlap (bytes ", cur.data - payload, " to ",
                                                     prev.data + prev.num_bytes - payload, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int64_t TensorView::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::ShapeString() const {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

void CopyToFloat(const TensorView& tensor, float* out) {
  const int64_t n = tensor.NumElements();
  if (tensor.dtype == DType::kF32) {
    std::memcpy(out, tensor.data, n * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, tensor.data + 2 * i, sizeof(bits));
    out[i] = tensor.dtype == DType::kBF16 ? Bf16ToFloat(bits) : F16ToFloat(bits);
  }
}

absl::StatusOr<std::vector<TensorView>> ParseSafetensorsHeader(std::string_view header_json,
                                                               const std::byte* payload,
                                                               size_t payload_size) {
  const nlohmann::json header =
      nlohmann::json::parse(header_json, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return absl::InvalidArgumentError("header is not valid JSON");
  if (!header.is_object()) return absl::InvalidArgumentError("header is not a JSON object");
  std::vector<TensorView> tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    ASSIGN_OR_RETURN(TensorView view, ParseEntry(name, entry, payload, payload_size));
    tensors.push_back(std::move(view));
  }
  RETURN_IF_ERROR(CheckNoOverlap(tensors, payload));
  return tensors;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::filesystem::path& path) {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", what));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat(path.string(), ": cannot open: ", std::strerror(errno)));
  }
  struct stat info;
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return fail("not a regular file");
  }
  const size_t size = static_cast<size_t>(info.st_size);
  if (size < 8) {
    ::close(fd);
    return fail(absl::StrCat("file of ", size, " bytes is too short for a safetensors header"));
  }
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED) return fail(absl::StrCat("mmap failed: ", std::strerror(errno)));

  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = mapping;
  file->mapping_size_ = size;

  const auto* bytes = static_cast<const std::byte*>(mapping);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<uint8_t>(bytes[i]);
  if (header_size > kMaxHeaderBytes) {
    return fail(absl::StrCat("header length ", header_size, " exceeds the limit of ",
                             kMaxHeaderBytes, " bytes"));
  }
  if (header_size > size - 8) {
    return fail(absl::StrCat("header length ", header_size, " exceeds the file size ", size,
                             " (truncated file?)"));
  }
  const std::string_view header(reinterpret_cast<const char*>(bytes + 8), header_size);
  auto tensors = ParseSafetensorsHeader(header, bytes + 8 + header_size, size - 8 - header_size);
  if (!tensors.ok()) return fail(std::string(tensors.status().message()));
  file->tensors_ = std::move(*tensors);
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

}  // namespace ridge
