// A fingerprint of the model a server runs, for saved sessions: a state belongs to the weights
// that produced it. SHA-256 over the config and, for a checkpoint, each safetensors file's name,
// size and header (names, shapes, dtypes, offsets) and 64 KiB samples of its data at 16 evenly
// spaced places: reading every byte of a 16 GB checkpoint would hold up the start by seconds,
// while two different trainings (or random seeds) differ everywhere. --load-format random hashes
// the config and the seed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "absl/status/statusor.h"

namespace ridge {

absl::StatusOr<std::string> ModelFingerprint(const std::filesystem::path& model,
                                             bool random_weights, uint64_t random_seed = 0);

}  // namespace ridge
