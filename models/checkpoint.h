// A Hugging Face checkpoint folder: config.json plus one model.safetensors or shards listed
// in model.safetensors.index.json, all memory-mapped and validated.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/safetensors.h"
#include "nlohmann/json.hpp"

namespace ridge {

class Checkpoint {
 public:
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::filesystem::path& dir);

  const nlohmann::json& config() const { return config_; }
  const std::filesystem::path& dir() const { return dir_; }

  // nullptr when the checkpoint has no tensor of that name.
  const TensorView* Find(const std::string& name) const;
  std::vector<std::string> TensorNames() const;

 private:
  Checkpoint() = default;
  absl::Status AddShard(const std::filesystem::path& file);

  std::filesystem::path dir_;
  nlohmann::json config_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, const TensorView*> tensors_;
};

// Reads and parses a JSON file, limited in size, with errors naming the file.
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::filesystem::path& path);

}  // namespace ridge
