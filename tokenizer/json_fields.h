// Typed access to tokenizer.json fields that turns a missing or mistyped field into an
// InvalidArgument status naming it, instead of nlohmann's exceptions.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace ridge {

using Json = nlohmann::json;

// Debian's abseil keeps its own string_view type, distinct from std::string_view.
inline absl::string_view AsAbsl(std::string_view s) { return {s.data(), s.size()}; }

inline absl::Status FieldError(const char* where, const char* key, const char* expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": field '", key, "' is missing or not ", expected));
}

inline absl::StatusOr<std::string> GetString(const Json& j, const char* where, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return FieldError(where, key, "a string");
  return it->get<std::string>();
}

// A string field that may be absent or null.
inline absl::StatusOr<std::string> GetOptionalString(const Json& j, const char* where,
                                                     const char* key, std::string fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) return FieldError(where, key, "a string");
  return it->get<std::string>();
}

inline absl::StatusOr<bool> GetBool(const Json& j, const char* where, const char* key,
                                    bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return FieldError(where, key, "a boolean");
  return it->get<bool>();
}

inline absl::StatusOr<int64_t> GetInt(const Json& j, const char* where, const char* key,
                                      int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) return FieldError(where, key, "an integer");
  return it->get<int64_t>();
}

// The "type" tag of a component object.
inline absl::StatusOr<std::string> GetType(const Json& j, const char* where) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, " is not an object"));
  return GetString(j, where, "type");
}

}  // namespace ridge
