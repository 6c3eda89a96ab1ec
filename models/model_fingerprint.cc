#include "models/model_fingerprint.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/sha256.h"

namespace ridge {
namespace {

constexpr int64_t kSamples = 16;
constexpr int64_t kSampleBytes = 64 << 10;
constexpr uint64_t kMaxHeaderBytes = 100 << 20;

absl::Status HashFile(const std::filesystem::path& path, Sha256& sha, bool safetensors) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::error_code error;
  const uint64_t size = std::filesystem::file_size(path, error);
  if (error) return absl::NotFoundError(absl::StrCat("cannot stat ", path.string()));
  sha.Update(absl::StrCat(path.filename().string(), "\n", size, "\n"));
  auto read = [&](uint64_t offset, uint64_t bytes) -> absl::Status {
    std::string chunk(bytes, '\0');
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(chunk.data(), static_cast<std::streamsize>(bytes));
    if (!in) return absl::DataLossError(absl::StrCat("cannot read ", path.string()));
    sha.Update(chunk);
    return absl::OkStatus();
  };
  if (!safetensors) return read(0, size);
  uint64_t header = 0;
  if (size >= 8) {
    in.read(reinterpret_cast<char*>(&header), 8);
    header = std::min({header, size - 8, kMaxHeaderBytes});
  }
  if (absl::Status s = read(0, std::min<uint64_t>(size, 8 + header)); !s.ok()) return s;
  const uint64_t data = std::min<uint64_t>(size, 8 + header), rest = size - data;
  for (int64_t i = 0; i < kSamples && rest > 0; ++i) {
    const uint64_t bytes = std::min<uint64_t>(kSampleBytes, rest);
    const uint64_t offset = data + (rest - bytes) * i / (kSamples - 1);
    if (absl::Status s = read(offset, bytes); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ModelFingerprint(const std::filesystem::path& model,
                                             bool random_weights, uint64_t random_seed) {
  Sha256 sha;
  sha.Update("ridgeserve model fingerprint v1\n");
  const bool file = std::filesystem::is_regular_file(model);
  const std::filesystem::path config = file ? model : model / "config.json";
  if (absl::Status s = HashFile(config, sha, /*safetensors=*/false); !s.ok()) return s;
  if (random_weights) {
    sha.Update(absl::StrCat("random weights, seed ", random_seed));
    return HexDigest(sha.Finish());
  }
  std::vector<std::filesystem::path> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(model, error)) {
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
  }
  if (error) return absl::NotFoundError(absl::StrCat("cannot list ", model.string()));
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    if (absl::Status s = HashFile(path, sha, /*safetensors=*/true); !s.ok()) return s;
  }
  return HexDigest(sha.Finish());
}

}  // namespace ridge
