// API keys: who may use the generation APIs. A request carries a key as
// `Authorization: Bearer <key>` (HTTP) or `authorization: Bearer <key>` metadata (gRPC), as the
// OpenAI clients send it; without configured keys every request is accepted.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ridge {

class ApiKeys {
 public:
  // `key` (--api-key; empty: none) and the keys of `key_file` (--api-key-file; empty: none; one
  // key a line, blank lines and lines starting with '#' skipped), combined. A key must be 8 to
  // 256 printable characters without spaces; an unreadable or keyless file is an error naming
  // it.
  static absl::StatusOr<ApiKeys> Load(const std::string& key, const std::string& key_file);

  bool enabled() const { return !keys_.empty(); }
  size_t size() const { return keys_.size(); }
  // Whether an Authorization value ("Bearer <key>", the scheme case-insensitive) names a key;
  // always true when no keys are configured. Compares in time independent of where a key
  // differs.
  bool Accepts(std::string_view authorization) const;

 private:
  std::vector<std::string> keys_;
};

}  // namespace ridge
