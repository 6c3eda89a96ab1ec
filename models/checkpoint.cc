#include "models/checkpoint.h"

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ridge {
namespace {

constexpr uintmax_t kMaxJsonBytes = 64ull << 20;

// Shard names come from a file we do not trust: they must name a plain file in the folder.
absl::Status CheckShardName(const std::string& name) {
  const std::filesystem::path p(name);
  if (name.empty() || p.has_parent_path() || p.is_absolute() || name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat("model.safetensors.index.json: shard name '",
                                                   name, "' must be a file name in the folder"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::filesystem::path& path) {
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error) {
    return absl::NotFoundError(absl::StrCat(path.string(), ": cannot read: ", error.message()));
  }
  if (size > kMaxJsonBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": ", size,
                                                   " bytes is larger than the limit of ",
                                                   kMaxJsonBytes, " for a JSON file"));
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  nlohmann::json parsed = nlohmann::json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not valid JSON"));
  }
  return parsed;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) {
    return absl::NotFoundError(absl::StrCat("model folder ", dir.string(), " does not exist"));
  }
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint());
  checkpoint->dir_ = dir;
  ASSIGN_OR_RETURN(checkpoint->config_, ReadJsonFile(dir / "config.json"));
  if (!checkpoint->config_.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat((dir / "config.json").string(), ": expected a JSON object"));
  }

  const auto index_path = dir / "model.safetensors.index.json";
  if (!std::filesystem::exists(index_path)) {
    RETURN_IF_ERROR(checkpoint->AddShard(dir / "model.safetensors"));
    return checkpoint;
  }

  ASSIGN_OR_RETURN(const nlohmann::json index, ReadJsonFile(index_path));
  const auto map_it = index.is_object() ? index.find("weight_map") : index.end();
  if (map_it == index.end() || !map_it->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path.string(), ": missing object 'weight_map'"));
  }
  std::set<std::string> shard_names;
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path.string(), ": shard of tensor ", tensor, " is not a string"));
    }
    RETURN_IF_ERROR(CheckShardName(shard.get<std::string>()));
    shard_names.insert(shard.get<std::string>());
  }
  for (const auto& shard : shard_names) RETURN_IF_ERROR(checkpoint->AddShard(dir / shard));
  for (const auto& [tensor, shard] : map_it->items()) {
    const TensorView* view = checkpoint->Find(tensor);
    if (view == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", tensor, ": listed in ", index_path.filename().string(), " under ",
                       shard.get<std::string>(), " but not found there"));
    }
  }
  return checkpoint;
}

absl::Status Checkpoint::AddShard(const std::filesystem::path& file) {
  if (!std::filesystem::exists(file)) {
    return absl::NotFoundError(absl::StrCat(
        file.string(),
        " does not exist (expected model.safetensors or model.safetensors.index.json)"));
  }
  ASSIGN_OR_RETURN(auto shard, SafetensorsFile::Open(file));
  for (const TensorView& view : shard->tensors()) {
    if (!tensors_.emplace(view.name, &view).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", view.name, " appears in more than one shard (", file.string(), ")"));
    }
  }
  shards_.push_back(std::move(shard));
  return absl::OkStatus();
}

const TensorView* Checkpoint::Find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, view] : tensors_) names.push_back(name);
  return names;
}

}  // namespace ridge
