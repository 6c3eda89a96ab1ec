// Typed, range-checked reads of config.json fields, with errors that name the field (nested
// fields by their path, e.g. "gka_config.num_iter"). A field that is absent or null leaves the
// output unchanged: the caller's default stands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace ridge {

class ConfigFields {
 public:
  // `prefix` is prepended to field names in errors ("" at the top level).
  ConfigFields(const nlohmann::json& json, std::string prefix)
      : json_(json), prefix_(std::move(prefix)) {}

  bool IsSet(const char* field) const;
  absl::Status Int(const char* field, int64_t min, int64_t max, int64_t* out) const;
  absl::Status Double(const char* field, double min, double max, double* out) const;
  absl::Status Bool(const char* field, bool* out) const;
  absl::Status String(const char* field, std::string* out) const;
  // A token id: null (-1), an integer, or a list whose first entry is used.
  absl::Status TokenId(const char* field, int64_t vocab, int64_t* out) const;
  // End-of-sequence ids: an integer or a list of them (each checked); null gives an empty list.
  absl::Status TokenIds(const char* field, int64_t vocab, std::vector<int64_t>* out) const;
  // The error for `field` (its full path) with `problem`.
  absl::Status Error(const std::string& field, const std::string& problem) const;

 private:
  const nlohmann::json& json_;
  std::string prefix_;
};

}  // namespace ridge
