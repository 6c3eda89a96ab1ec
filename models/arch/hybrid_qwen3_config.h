// The hybrid_qwen3 architecture's config.json (Qwen3 with Gated KalmaNet and sliding-window
// layers; shared/specs/gka-hybrid-qwen3.md, section 1) read into a ModelSpec. Everything the
// spec does not cover is refused with an error naming the field and its value.
#pragma once

#include "absl/status/statusor.h"
#include "models/model_spec.h"
#include "nlohmann/json.hpp"

namespace ridge {

absl::StatusOr<ModelSpec> ParseHybridQwen3Config(const nlohmann::json& json);

}  // namespace ridge
