#include "models/config_fields.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace ridge {

absl::Status ConfigFields::Error(const std::string& field, const std::string& problem) const {
  return absl::InvalidArgumentError(
      absl::StrCat("config.json: field '", prefix_, field, "' ", problem));
}

bool ConfigFields::IsSet(const char* field) const {
  const auto it = json_.find(field);
  return it != json_.end() && !it->is_null();
}

absl::Status ConfigFields::Int(const char* field, int64_t min, int64_t max, int64_t* out) const {
  if (!IsSet(field)) return absl::OkStatus();
  const auto& value = json_.at(field);
  if (!value.is_number_integer()) return Error(field, "must be an integer");
  const int64_t v = value.get<int64_t>();
  if (v < min || v > max) {
    return Error(field, absl::StrCat("is ", v, ", expected ", min, " to ", max));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ConfigFields::Double(const char* field, double min, double max, double* out) const {
  if (!IsSet(field)) return absl::OkStatus();
  const auto& value = json_.at(field);
  if (!value.is_number()) return Error(field, "must be a number");
  const double v = value.get<double>();
  if (!std::isfinite(v) || v < min || v > max) {
    return Error(field, absl::StrCat("is ", v, ", expected ", min, " to ", max));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ConfigFields::Bool(const char* field, bool* out) const {
  if (!IsSet(field)) return absl::OkStatus();
  if (!json_.at(field).is_boolean()) return Error(field, "must be true or false");
  *out = json_.at(field).get<bool>();
  return absl::OkStatus();
}

absl::Status ConfigFields::String(const char* field, std::string* out) const {
  if (!IsSet(field)) return absl::OkStatus();
  if (!json_.at(field).is_string()) return Error(field, "must be a string");
  *out = json_.at(field).get<std::string>();
  return absl::OkStatus();
}

absl::Status ConfigFields::TokenId(const char* field, int64_t vocab, int64_t* out) const {
  if (!json_.contains(field)) return absl::OkStatus();
  const nlohmann::json* value = &json_.at(field);
  if (value->is_null()) {
    *out = -1;
    return absl::OkStatus();
  }
  if (value->is_array() && !value->empty()) value = &value->at(0);
  if (!value->is_number_integer()) return Error(field, "must be an integer token id");
  const int64_t id = value->get<int64_t>();
  if (id < 0 || id >= vocab) {
    return Error(field, absl::StrCat("is ", id, ", outside the vocabulary of ", vocab));
  }
  *out = id;
  return absl::OkStatus();
}

absl::Status ConfigFields::TokenIds(const char* field, int64_t vocab,
                                    std::vector<int64_t>* out) const {
  if (!json_.contains(field)) return absl::OkStatus();
  const nlohmann::json& value = json_.at(field);
  out->clear();
  if (value.is_null()) return absl::OkStatus();
  const nlohmann::json list = value.is_array() ? value : nlohmann::json::array({value});
  if (list.size() > 64) return Error(field, "lists more than 64 token ids");
  for (const auto& entry : list) {
    if (!entry.is_number_integer()) return Error(field, "must be integer token ids");
    const int64_t id = entry.get<int64_t>();
    if (id < 0 || id >= vocab) {
      return Error(field, absl::StrCat("has ", id, ", outside the vocabulary of ", vocab));
    }
    out->push_back(id);
  }
  return absl::OkStatus();
}

}  // namespace ridge
