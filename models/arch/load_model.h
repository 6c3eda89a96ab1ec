// The one place that knows every architecture: reads config.json's model_type and hands the
// folder to that architecture's loader. Nothing else branches on the model type.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "absl/status/statusor.h"
#include "models/model.h"

namespace ridge {

enum class LoadFormat {
  kCheckpoint,  // the folder's safetensors
  kRandom,      // random weights in the shape of its config.json (like vLLM's dummy format)
};

// Tokens a KV block holds when no flag says otherwise.
inline constexpr int64_t kDefaultKvBlockSize = 16;

// `dir` is a checkpoint folder; with kRandom it may also name a config.json-style file.
// `random_seed` seeds kRandom's weights.
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::filesystem::path& dir,
                                                 LoadFormat format,
                                                 int64_t kv_block_size = kDefaultKvBlockSize,
                                                 uint64_t random_seed = 0);

// The model as data from config.json alone (no tensor read).
absl::StatusOr<ModelSpec> ReadModelSpec(const std::filesystem::path& dir);

}  // namespace ridge
