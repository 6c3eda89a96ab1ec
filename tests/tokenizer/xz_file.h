// Reads an xz-compressed test data file (the corpus and goldens are stored compressed to keep
// the repository small).
#pragma once

#include <filesystem>
#include <string>

#include "absl/status/statusor.h"

namespace ridge {

absl::StatusOr<std::string> ReadXzFile(const std::filesystem::path& path);

}  // namespace ridge
